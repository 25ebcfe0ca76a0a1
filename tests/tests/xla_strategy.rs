//! The `xla` strategy on XLA's CPU plugin (4 devices): one process drives the 4 devices as one
//! SPMD program. It plans one process, trains the wide MLP where `ddp` on 4 processes does
//! (within float reassociation), and a fit cut short resumes bitwise.
#![cfg(feature = "tpu-xla")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use ember::DevicesFlag;
use ember::xla::XlaAccelerator;
use ember::{Accelerator, Launcher, TrainerFlags};
use ember_acceptance::{checkpoints, mpirun_available, plan, process};

/// Whether XLA's CPU plugin is here with its 4 devices (saying why not when it is not).
fn four_devices() -> bool {
    let devices = XlaAccelerator::auto_device_count();
    if devices < 4 {
        eprintln!(
            "skip: the PJRT plugin shows {devices} device(s), not 4 (scripts/setup.sh caches XLA's CPU plugin)"
        );
    }
    devices >= 4
}

fn xla_flags() -> TrainerFlags {
    TrainerFlags::default()
        .accelerator("xla")
        .strategy("xla")
        .devices(DevicesFlag::Count(4))
}

#[test]
fn the_xla_strategy_plans_one_process_for_every_device_and_refuses_what_it_cannot_run() {
    if !four_devices() {
        return;
    }
    let inventory = "xla=4";
    let p = plan(&xla_flags(), inventory).unwrap();
    assert_eq!((p.strategy.as_str(), p.devices.len()), ("xla", 4));
    assert_eq!((p.world_size, p.launcher()), (1, Launcher::None));
    assert!(p.drives_every_device());
    let two_nodes = plan(&xla_flags().num_nodes(2), inventory).unwrap_err();
    assert_eq!(two_nodes.flag, "--trainer.strategy");
    assert!(two_nodes.message.contains("one host"), "{two_nodes}");
    let on_cpu = plan(&xla_flags().accelerator("cpu"), inventory).unwrap_err();
    assert!(
        on_cpu.message.contains("--trainer.accelerator=xla"),
        "{on_cpu}"
    );
}

/// `wide_adam fit` on the plugin's 4 devices under `strategy`, in `dir`.
fn wide(dir: &Path, strategy: &str, args: &[&str]) -> Output {
    let mut command = process::quiet(env!("CARGO_BIN_EXE_wide_adam"), dir, &["fit"]);
    // The plugin's devices, as probing finds them.
    command.env_remove("EMBER_INVENTORY").args([
        "--trainer.accelerator=xla",
        "--trainer.devices=4",
        &format!("--trainer.strategy={strategy}"),
        "--trainer.logger=false",
        "--data.samples=1024",
        "--data.batch_size=32",
    ]);
    let out = command.args(args).output().expect("wide_adam runs");
    assert!(
        out.status.success(),
        "{strategy}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The newest checkpoint a run in `dir` wrote.
fn newest(dir: &Path) -> PathBuf {
    checkpoints::newest(&dir.join("checkpoints"))
}

/// Every float tensor of a checkpoint by name (see [`checkpoints::tensors`]), as f32 values.
fn tensors(path: &Path) -> BTreeMap<String, Vec<f32>> {
    (checkpoints::tensors(path).into_iter())
        .filter_map(|(name, data)| Some((name, data.convert::<f32>().to_vec::<f32>().ok()?)))
        .collect()
}

#[test]
fn one_process_on_four_devices_trains_as_ddp_on_four_processes_does() {
    if !four_devices() || !mpirun_available() {
        eprintln!("skip: needs the plugin's 4 devices and mpirun");
        return;
    }
    let (spmd, ddp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let epochs = ["--trainer.max_epochs=3"];
    let one = wide(spmd.path(), "xla", &epochs);
    let four = wide(ddp.path(), "ddp", &epochs);
    let summary = |out: &Output| String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        summary(&one).contains("on xla (4 devices, one process);"),
        "{}",
        summary(&one)
    );
    assert!(
        summary(&four).contains("(4 processes)"),
        "{}",
        summary(&four)
    );
    let (a, b) = (tensors(&newest(spmd.path())), tensors(&newest(ddp.path())));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    // 3 epochs of 8 steps each, each step's batch of 128 split four ways: the two sum the
    // same gradients in different orders, so they agree to float reassociation, not bitwise
    // (measured: 4e-7 of each tensor's largest value at most).
    for (name, x) in &a {
        let y = &b[name];
        let scale = x.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        let worst = x
            .iter()
            .zip(y)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-5 * scale,
            "{name}: differs by {worst} (scale {scale})"
        );
    }
    let acc = |out: &Output| ember_acceptance::reported(&summary(out), "val_acc").unwrap();
    assert!(
        (acc(&one) - acc(&four)).abs() <= 1.0 / 256.0,
        "val_acc {} vs {}",
        acc(&one),
        acc(&four)
    );
}

#[test]
fn a_fit_cut_short_resumes_bitwise_under_the_xla_strategy() {
    if !four_devices() {
        return;
    }
    let (whole, cut) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    wide(whole.path(), "xla", &["--trainer.max_epochs=2"]);
    wide(cut.path(), "xla", &["--trainer.max_epochs=1"]);
    let first = newest(cut.path());
    let first = format!("--trainer.ckpt_path={}", first.display());
    wide(cut.path(), "xla", &["--trainer.max_epochs=2", &first]);
    let (a, b) = (tensors(&newest(whole.path())), tensors(&newest(cut.path())));
    assert_eq!(a, b, "the resumed fit ended elsewhere");
}
