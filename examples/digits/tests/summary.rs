//! `digits fit` prints the model summary on stderr when fit starts, unless
//! `--trainer.enable_model_summary=false`.

use std::process::Command;

fn fit_stderr(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
        ])
        .args(extra)
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn fit_prints_the_model_summary_unless_turned_off() {
    // The default MLP 64-256-256-10: 16,640 + 65,792 + 2,570 parameters, f32.
    let err = fit_stderr(&[]);
    for expected in [
        "0 | mlp  | Mlp  | 85.0 K",
        "85.0 K    Trainable params",
        "0         Non-trainable params",
        "0.340     Total estimated model params size (MB)",
    ] {
        assert!(err.contains(expected), "no `{expected}` in\n{err}");
    }
    let err = fit_stderr(&["--trainer.enable_model_summary=false"]);
    assert!(!err.contains("Trainable params"), "{err}");
}
