//! A model whose `configure_optimizers` picks its own optimizer (this one: Adam at `model.lr`)
//! refuses `--optimizer` and `--lr_scheduler` rather than train with another optimizer than
//! the one asked for, naming the flag and what the model would need.

use std::process::Command;

#[test]
fn optimizer_flags_the_model_does_not_read_exit_2_before_anything_is_written() {
    for flag in [
        "--optimizer=SGD",
        "--lr_scheduler={class_path: StepLR, init_args: {step_size: 2}}",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_first_model"))
            .args(["fit", "--trainer.max_epochs=1", flag])
            .current_dir(dir.path())
            .env("EMBER_INVENTORY", "")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        let name = flag.split('=').next().unwrap();
        assert!(err.contains(&format!("{name} value")), "{err}");
        assert!(err.contains("Optimizers::from_hparams"), "{err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{flag} wrote {left:?}");
    }
}
