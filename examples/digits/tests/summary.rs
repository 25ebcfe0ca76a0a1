//! What `digits fit` prints: the model summary on stderr when fit starts, unless
//! `--trainer.enable_model_summary=false`, and the report of the final values when it ends.

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

/// The `trained ...` line of a 3-epoch fit (69 steps) logging every `every` steps.
fn report_logging_every(every: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.max_epochs=3",
            "--trainer.enable_progress_bar=false",
        ])
        .arg(format!("--trainer.log_every_n_steps={every}"))
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("trained ")).unwrap();
    // Everything but the wall time.
    line.split(" in ").next().unwrap().to_owned() + line.split(" steps/s)").nth(1).unwrap()
}

/// Issue 32.5: the end-of-fit report gives the last step's values, not the last logged ones
/// (Lightning's callback_metrics hold every step's; loggers get every n-th).
#[test]
fn the_report_gives_the_last_steps_values_whatever_is_logged() {
    let every_step = report_logging_every("1");
    assert!(every_step.contains("train_loss"), "{every_step}");
    assert_eq!(report_logging_every("50"), every_step);
    assert_eq!(report_logging_every("1000"), every_step);
}
