//! The conv example (Conv2d, BatchNorm, Dropout, pooling, a decaying learning rate) on the xla
//! accelerator, XLA's CPU plugin here: it trains through the CLI to the accuracy it reaches on
//! cpu, and a fit stopped mid-epoch resumes bitwise (tests/common/mod.rs).
#![cfg(feature = "tpu-xla")]

mod common;

use std::process::Command;

use ember::xla::XlaAccelerator;
use ember::{Accelerator, Plan, Precision};

fn plugin_missing() -> bool {
    let missing = !XlaAccelerator::is_available();
    if missing {
        eprintln!("skip: no PJRT plugin (scripts/setup.sh caches XLA's CPU plugin)");
    }
    missing
}

/// `conv fit --trainer.accelerator=xla ARGS`: the `val_acc` it reports.
fn val_acc_on_xla(args: &[&str]) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_conv"))
        .args([
            "fit",
            "--trainer.accelerator=xla",
            "--trainer.enable_progress_bar=false",
        ])
        .args(args)
        .current_dir(dir.path())
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ember_acceptance::reported(&stdout, "val_acc")
        .unwrap_or_else(|| panic!("no val_acc in {stdout}"))
}

#[test]
fn fit_on_xla_reaches_97_percent() {
    if plugin_missing() {
        return;
    }
    let val_acc = val_acc_on_xla(&[]);
    assert!(val_acc >= 0.97, "val_acc {val_acc}");
}

/// One process driving the plugin's 4 devices (batch-norm statistics over the whole step's
/// batch, as the program is one over every device) trains to the same band.
#[test]
fn fit_with_the_xla_strategy_on_four_devices_reaches_97_percent() {
    if plugin_missing() {
        return;
    }
    let val_acc = val_acc_on_xla(&["--trainer.strategy=xla", "--trainer.devices=4"]);
    assert!(val_acc >= 0.97, "val_acc {val_acc}");
}

#[test]
fn a_resumed_conv_fit_continues_bitwise_on_xla() {
    if plugin_missing() {
        return;
    }
    common::resumes_bitwise::<XlaAccelerator>(&Plan::local("xla", Precision::F32True));
}
