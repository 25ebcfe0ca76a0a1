//! The custom accelerator is selectable from the CLI, listed in --help, and trains.

use std::process::Command;

fn app(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_custom_accelerator"))
        .args(args)
        .current_dir(dir.path())
        .env_remove("EMBER_INVENTORY")
        .output()
        .expect("the binary runs")
}

#[test]
fn xpu_is_listed_in_help() {
    for args in [&["--help"][..], &["fit", "--help"][..]] {
        let out = app(args);
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("xpu") && help.contains("out-of-tree"),
            "{help}"
        );
    }
}

#[test]
fn xpu_is_planned_with_its_own_device_rules() {
    let out = app(&[
        "fit",
        "--trainer.accelerator=xpu",
        "--trainer.devices=2",
        "--print-plan",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["accelerator"], "xpu");
    assert_eq!(plan["devices"], serde_json::json!([0, 1]));
    assert_eq!(plan["strategy"], "ddp");

    let out = app(&["fit", "--trainer.accelerator=xpu", "--print-plan"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--trainer.devices") && err.contains("asked for explicitly"),
        "{err}"
    );
}

#[test]
fn xpu_trains_the_digits_job() {
    let out = app(&[
        "fit",
        "--trainer.accelerator=xpu",
        "--trainer.devices=1",
        "--trainer.max_epochs=2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("on xpu") && stderr.contains("epoch 2/2"),
        "{stdout}{stderr}"
    );
}
