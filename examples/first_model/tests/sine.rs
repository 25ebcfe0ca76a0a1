//! The newcomer's sin(3x) program (src/bin/sine.rs): its burn `#[derive(Config)]` sections read
//! from flags and config files, and it learns the curve.

use std::path::Path;
use std::process::{Command, Output};

fn sine(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sine"))
        .args(args)
        .args([
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=false",
        ])
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap()
}

/// The value of `name` in fit's summary line.
fn metric(stdout: &str, name: &str) -> f64 {
    stdout
        .rsplit(&format!("; {name} "))
        .next()
        .and_then(|rest| rest.split(';').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {stdout}"))
}

#[test]
fn the_sine_program_learns_the_curve() {
    let dir = tempfile::tempdir().unwrap();
    let short = sine(dir.path(), &["fit", "--trainer.max_epochs=1"]);
    let long = sine(dir.path(), &["fit", "--trainer.max_epochs=30"]);
    for out in [&short, &long] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let first = metric(&String::from_utf8_lossy(&short.stdout), "val_loss");
    let last = metric(&String::from_utf8_lossy(&long.stdout), "val_loss");
    // sin(3x) over [-1, 1] has a mean square of about 0.5: a model that learned nothing
    // is near that, one that learned the curve far below.
    assert!(
        last < 0.01 && last < first / 5.0,
        "val_loss {first} after 1 epoch, {last} after 30"
    );
}

#[test]
fn burn_config_sections_take_flags_and_partial_config_files() {
    let dir = tempfile::tempdir().unwrap();
    let printed = sine(dir.path(), &["fit", "--model.hidden=8", "--print-config"]);
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&printed.stdout).unwrap();
    assert_eq!(yaml["model"]["hidden"], 8);
    assert_eq!(yaml["model"]["lr"], 0.01);
    assert_eq!(yaml["data"]["samples"], 1000);
    // A file that sets one key of each section: the others keep their defaults.
    std::fs::write(
        dir.path().join("run.yaml"),
        "model: {lr: 0.005}\ndata: {batch_size: 50}\n",
    )
    .unwrap();
    let out = sine(
        dir.path(),
        &["fit", "--config=run.yaml", "--trainer.max_steps=3"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.starts_with("trained 3 steps"), "{summary}");
    let bad = sine(dir.path(), &["fit", "--model.hidden=abc"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--model.hidden value `abc`"));
}
