//! `--trainer.max_restarts` with real ranks: a rank killed during a 2-rank run makes the local
//! launcher start every rank again from the last checkpoint, and the run ends bitwise where an
//! uninterrupted run ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn_flex::{Flex, FlexDevice};
use digits::model::{DigitsModel, ModelConfig};
use ember::trainer::checkpoint::Checkpoint;
use ember_acceptance::mpirun_available;
use ember_acceptance::process::ranks_of;
use ember_acceptance::resume::float_bytes;

const RUN: [&str; 7] = [
    "fit",
    "--trainer.devices=2",
    "--trainer.max_epochs=150",
    "--trainer.seed=42",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
];

fn digits(dir: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_digits"));
    command
        .args(RUN)
        .args(extra)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1");
    command
}

/// The checkpoints under `dir`'s logs, every version.
fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    let Ok(versions) = std::fs::read_dir(dir.join("lightning_logs")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = versions
        .flatten()
        .filter_map(|v| std::fs::read_dir(v.path().join("checkpoints")).ok())
        .flat_map(|files| files.flatten().map(|f| f.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .collect();
    files.sort();
    files
}

/// The model weights a checkpoint holds, as bytes.
fn weights(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    let model = DigitsModel::<Flex>::new(&ModelConfig::default(), &FlexDevice);
    let model = Checkpoint::decode(&bytes, path)
        .unwrap()
        .load_model::<Flex, _>(model, path)
        .unwrap();
    float_bytes(&model)
}

/// The final checkpoint of the run in `dir`: the one with `step=1800` (150 epochs of 12 steps).
fn final_checkpoint(dir: &Path) -> PathBuf {
    let files = checkpoints(dir);
    let last = files
        .iter()
        .find(|p| p.to_string_lossy().ends_with("step=1800.ckpt"));
    last.unwrap_or_else(|| panic!("no final checkpoint among {files:?}"))
        .clone()
}

#[test]
fn a_killed_rank_restarts_the_run_from_its_last_checkpoint_and_it_ends_bitwise_uninterrupted() {
    if !mpirun_available() {
        return;
    }
    let whole = tempfile::tempdir().unwrap();
    let out = digits(whole.path(), &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let mut launcher = digits(dir.path(), &["--trainer.max_restarts=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill rank 1 once rank 0 has written a checkpoint and both ranks are still training.
    let started = Instant::now();
    let ranks = loop {
        let ranks = ranks_of(launcher.id(), "digits");
        if ranks.len() == 2 && !checkpoints(dir.path()).is_empty() {
            break ranks;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("no checkpoint while both ranks ran: {ranks:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let killed = Command::new("kill")
        .args(["-KILL", &ranks[1].1.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = launcher.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "restarting every rank from the last checkpoint (restart 1 of --trainer.max_restarts=1)"
        ),
        "{stderr}"
    );
    let resumed = final_checkpoint(dir.path());
    assert!(
        !resumed.starts_with(dir.path().join("lightning_logs/version_0")),
        "the run finished before the kill: {resumed:?}"
    );
    assert!(
        weights(&resumed) == weights(&final_checkpoint(whole.path())),
        "the restarted run's weights differ from the uninterrupted run's"
    );
}
