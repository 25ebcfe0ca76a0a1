//! Weight averaging from the command line: EMAWeightAveraging under ddp and ddp_sharded (2 ranks) and
//! StochasticWeightAveraging on one, each a fit stopped after an epoch and resumed from its
//! `last.ckpt` ending with the files of the uninterrupted fit, bitwise (the averages and their
//! counters are in the checkpoint).

use std::path::Path;

use ember::checkpoint::Checkpoint;
use ember_acceptance::{mpirun_available, run_cpu_only};

/// Fits digits in `dir` with `args`; panics unless it succeeds.
fn fit(dir: &Path, args: &[&str]) {
    let quiet = [
        "fit",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    let out = run_cpu_only(
        env!("CARGO_BIN_EXE_digits"),
        dir,
        &[&quiet[..], args].concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "digits {args:?}: {stderr}");
}

/// Every tensor of a run's `last.ckpt` (weights and callback tensors), by name.
fn last(dir: &Path, version: usize) -> Vec<(String, Vec<u8>)> {
    let path = dir.join(format!(
        "lightning_logs/version_{version}/checkpoints/last.ckpt"
    ));
    let checkpoint = Checkpoint::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    let own = checkpoint
        .callback_tensors
        .into_iter()
        .flat_map(|(key, tensors)| {
            tensors
                .into_iter()
                .map(move |(name, data)| (format!("{key}.{name}"), data))
        });
    let mut tensors: Vec<_> = (checkpoint.weights.into_iter().chain(own))
        .map(|(name, data)| (name, data.as_bytes().to_vec()))
        .collect();
    tensors.sort();
    tensors
}

/// Fits 3 epochs; then 2 and a resume to 3; asserts both end with the same `last.ckpt`, which
/// holds tensors of `callback`.
fn resumes_bitwise(extra: &[&str], callback: &str) {
    let dir = tempfile::tempdir().unwrap();
    let callbacks = format!(
        "--trainer.callbacks=[{callback}, {{class_path: ModelCheckpoint, init_args: {{save_last: true}}}}]"
    );
    let run = |more: &[&str]| fit(dir.path(), &[extra, &[callbacks.as_str()], more].concat());
    run(&["--trainer.max_epochs=3"]);
    run(&["--trainer.max_epochs=2"]);
    run(&[
        "--trainer.max_epochs=3",
        "--trainer.ckpt_path=lightning_logs/version_1/checkpoints/last.ckpt",
    ]);
    let whole = last(dir.path(), 0);
    let key = callback.split([',', '}']).next().unwrap();
    let key = key.trim_start_matches("{class_path: ");
    assert!(
        whole.iter().any(|(name, _)| name.starts_with(key)),
        "{key}: {whole:?}"
    );
    assert_eq!(last(dir.path(), 2), whole);
}

#[test]
fn ema_under_ddp_resumes_bitwise() {
    if !mpirun_available() {
        return;
    }
    resumes_bitwise(
        &["--trainer.devices=2", "--trainer.strategy=ddp"],
        "{class_path: EMAWeightAveraging, init_args: {decay: 0.9}}",
    );
}

#[test]
fn swa_resumes_bitwise() {
    resumes_bitwise(
        &[],
        "{class_path: StochasticWeightAveraging, init_args: {swa_lrs: 0.01, swa_epoch_start: 2}}",
    );
}

#[test]
fn ema_under_ddp_sharded_resumes_bitwise() {
    // ddp_sharded partitions the optimizer's state, not the weights: every rank averages them.
    if !mpirun_available() {
        return;
    }
    resumes_bitwise(
        &["--trainer.devices=2", "--trainer.strategy=ddp_sharded"],
        "{class_path: EMAWeightAveraging, init_args: {decay: 0.9}}",
    );
}

/// A fit resumed without the averaging callback its checkpoint was written with trains on, but
/// says that callback's state is dropped (Lightning's "please add the following callbacks").
#[test]
fn resuming_without_the_callback_warns_that_its_state_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = [
        "fit",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    let run = |args: &[&str]| {
        let out = run_cpu_only(
            env!("CARGO_BIN_EXE_digits"),
            dir.path(),
            &[&quiet[..], args].concat(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "digits {args:?}: {stderr}");
        stderr
    };
    run(&[
        "--trainer.max_epochs=1",
        "--trainer.callbacks=[{class_path: EMAWeightAveraging, init_args: {decay: 0.9}}]",
    ]);
    let stderr = run(&["--trainer.max_epochs=2", "--trainer.ckpt_path=last"]);
    let warning = (stderr.lines())
        .find(|l| l.starts_with("warning:") && l.contains("holds the state of callbacks"))
        .unwrap_or_else(|| panic!("no warning: {stderr}"));
    assert!(warning.contains("EMAWeightAveraging"), "{warning}");
    assert!(
        !warning.contains("ModelCheckpoint"),
        "the run has that one: {warning}"
    );
}
