//! What only rank 0 writes under ddp (the model summary, the progress bar, the CSV and
//! TensorBoard loggers with curves.png, checkpoints) leaves the run bitwise unchanged: the
//! weights and optimizer state it ends with, and every loss it logs.
//!
//! The model summary once did not: it read burn's lazily created parameters on rank 0 before
//! anything else did, so rank 0 drew its initial weights at another point of the random
//! stream than without it (and broadcast them to every rank).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use ember::burn::tensor::TensorData;
use ember::checkpoint::Checkpoint;
use ember_acceptance::mpirun_available;

/// `digits fit` with 2 ranks for 3 epochs, seed 42, plus `extra`, in `dir`.
fn fit(dir: &Path, extra: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["fit", "--trainer.devices=2", "--trainer.max_epochs=3"])
        .args(["--trainer.seed=42"])
        .args(extra)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every rank-0-only output on.
const EVERYTHING: [&str; 4] = [
    "--trainer.enable_model_summary=true",
    "--trainer.enable_progress_bar=true",
    "--trainer.logger=[csv, tensorboard]",
    "--trainer.enable_checkpointing=true",
];

/// The one checkpoint a run wrote, decoded (under the logger's version folder, or under
/// `checkpoints/` when there is no logger, as in Lightning).
fn checkpoint(dir: &Path) -> Checkpoint {
    let logged = dir.join("lightning_logs/version_0/checkpoints");
    let ckpts = if logged.exists() {
        logged
    } else {
        dir.join("checkpoints")
    };
    let files: Vec<_> = std::fs::read_dir(&ckpts)
        .unwrap_or_else(|e| panic!("{}: {e}", ckpts.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    Checkpoint::decode(&std::fs::read(&files[0]).unwrap(), &files[0]).unwrap()
}

/// The tensors' bytes, sorted: optimizer state is keyed by burn's parameter ids, which each
/// run draws anew, so the same state is compared as the same set of tensors.
fn bytes(tensors: &BTreeMap<String, TensorData>) -> Vec<&[u8]> {
    let mut all: Vec<&[u8]> = tensors.values().map(TensorData::as_bytes).collect();
    all.sort_unstable();
    all
}

#[test]
fn the_summary_progress_bar_and_loggers_leave_the_weights_bitwise_unchanged() {
    if !mpirun_available() {
        return;
    }
    let (quiet, loud) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fit(
        quiet.path(),
        &[
            "--trainer.enable_model_summary=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=false",
        ],
    );
    let out = fit(loud.path(), &EVERYTHING);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Trainable params"),
        "the summary ran: {stderr}"
    );
    let version = loud.path().join("lightning_logs/version_0");
    for file in ["metrics.csv", "curves.png", "hparams.yaml"] {
        assert!(version.join(file).exists(), "{file}");
    }
    let (quiet, loud) = (checkpoint(quiet.path()), checkpoint(loud.path()));
    assert!(!quiet.weights.is_empty());
    let names = |c: &Checkpoint| c.weights.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&quiet), names(&loud));
    // Not assert_eq!: a failure would print every byte.
    assert!(
        bytes(&quiet.weights) == bytes(&loud.weights),
        "weights differ"
    );
    assert!(
        bytes(&quiet.optimizer_state) == bytes(&loud.optimizer_state),
        "optimizer state differs"
    );
    assert_eq!(quiet.header.metrics, loud.header.metrics);
}

#[test]
fn checkpoints_and_the_summary_leave_every_logged_loss_bitwise_unchanged() {
    if !mpirun_available() {
        return;
    }
    let (quiet, loud) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fit(
        quiet.path(),
        &[
            "--trainer.enable_model_summary=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.log_every_n_steps=1",
        ],
    );
    fit(
        loud.path(),
        &[&EVERYTHING[..], &["--trainer.log_every_n_steps=1"]].concat(),
    );
    let metrics = |dir: &Path| {
        std::fs::read_to_string(dir.join("lightning_logs/version_0/metrics.csv")).unwrap()
    };
    let (quiet, loud) = (metrics(quiet.path()), metrics(loud.path()));
    assert!(quiet.lines().count() > 36, "a row per step: {quiet}");
    assert_eq!(quiet, loud);
}
