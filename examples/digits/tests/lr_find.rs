//! `--trainer.lr_find` from the command line: the sweep before `fit` prints its suggestion,
//! draws `lr_find.png` with it marked, and the fit trains at it (hparams.yaml records it as
//! `model.lr`); two ranks take rank 0's; bad settings exit 2 naming the flag.

use std::path::Path;
use std::process::Output;

use ember_acceptance::{mpirun_available, run_cpu_only};

fn digits(dir: &Path, args: &[&str]) -> Output {
    let quiet = [
        "fit",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    run_cpu_only(
        env!("CARGO_BIN_EXE_digits"),
        dir,
        &[&quiet[..], args].concat(),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The suggestion the run printed.
fn suggested(out: &Output) -> f64 {
    let text = stderr(out);
    let after = text
        .split("suggested learning rate ")
        .nth(1)
        .unwrap_or_else(|| panic!("no suggestion: {text}"));
    after.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn the_suggestion_is_printed_drawn_and_trained_at() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits(
        dir.path(),
        &["--trainer.max_epochs=1", "--trainer.lr_find=true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lr = suggested(&out);
    assert!((1e-8..=1.0).contains(&lr), "{lr}");
    let log_dir = dir.path().join("lightning_logs/version_0");
    let png = std::fs::read(log_dir.join("lr_find.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let hparams = std::fs::read_to_string(log_dir.join("hparams.yaml")).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_str(&hparams).unwrap();
    let recorded = yaml["model"]["lr"].as_f64().unwrap();
    // Printed with 4 significant digits.
    assert!((recorded / lr - 1.0).abs() < 1e-3, "{recorded} vs {lr}");
    assert!(
        !dir.path().join("lightning_logs/version_1").exists(),
        "the sweep writes no run of its own"
    );
}

#[test]
fn two_ranks_train_at_rank_0s_suggestion() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--trainer.max_epochs=1",
        "--trainer.devices=2",
        "--trainer.lr_find={num_training: 40}",
    ];
    let out = digits(dir.path(), &args);
    // The ranks' weights are checked bitwise equal when fit ends: they trained at one rate.
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out).matches("suggested learning rate").count(), 1);
}

#[test]
fn bad_settings_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--trainer.lr_find={min_lr: 1.0, max_lr: 0.1}"],
            "min_lr < max_lr",
        ),
        (vec!["--trainer.lr_find={num_steps: 10}"], "num_steps"),
        (vec!["--trainer.lr_find={attr_name: rate}"], "model.rate"),
        (
            vec!["--trainer.lr_find=true", "--trainer.ckpt_path=x.ckpt"],
            "resumes",
        ),
    ] {
        let out = digits(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(
            text.contains("--trainer.lr_find") && text.contains(needle),
            "{text}"
        );
    }
}
