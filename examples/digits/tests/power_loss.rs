//! Checkpoints against power loss: a digits run is recorded call by call
//! (`ember_acceptance::powerloss`), the tree a power cut would leave is rebuilt after 100
//! calls made while checkpoints were being written, and each time `--trainer.ckpt_path=last`
//! and `best` must find a complete checkpoint: the newest that had been made durable.

// Digits trains on cpu in these tests whatever backend it is built with: the matrix's cpu row
// runs them, and a backend row (digits built with that backend's feature) would only repeat them.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ember::checkpoint::Checkpoint;
use ember_acceptance::powerloss::{Disk, Log, Op, build_shim};
use ember_acceptance::process::quiet;

/// Calls at which the power is cut, spread over the checkpoint writes.
const CRASH_POINTS: usize = 100;

/// Checkpoints every epoch: the best two by val_loss and `last.ckpt`, so that top-k rotation
/// removes files and `last.ckpt` is replaced in place at every save.
const CALLBACKS: &str = "--trainer.callbacks=[{class_path: ModelCheckpoint, init_args: {monitor: val_loss, save_top_k: 2, save_last: true}}]";

fn digits(dir: &Path, args: &[&str]) -> Command {
    let mut command = quiet(env!("CARGO_BIN_EXE_digits"), dir, args);
    command.env("RAYON_NUM_THREADS", "1");
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The global step of every complete checkpoint a power cut now would leave. A file under a
/// checkpoint's final name that does not decode is a torn checkpoint: an error.
fn complete_checkpoints(disk: &Disk) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    for (path, bytes) in disk.surviving() {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let (Some(bytes), true, false) = (bytes, name.ends_with(".ckpt"), name.starts_with('.'))
        else {
            continue;
        };
        let checkpoint = Checkpoint::decode(&bytes, &path)
            .unwrap_or_else(|e| panic!("a torn checkpoint survives the cut: {e:#}"));
        found.push((path, checkpoint.header.global_step));
    }
    found
}

/// Records a 12-epoch digits run in `root`; the calls it made there.
fn recorded_run(shim: &Path, root: &Path, log: &Path) -> Log {
    let out = digits(
        root,
        &[
            "fit",
            "--trainer.max_epochs=12",
            "--trainer.seed=7",
            CALLBACKS,
        ],
    )
    .env("LD_PRELOAD", shim)
    .env("POWERLOSS_ROOT", root)
    .env("POWERLOSS_LOG", log)
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    Log::parse(&std::fs::read(log).unwrap(), root).unwrap()
}

/// The step of the checkpoint an entry point chose (`--trainer.ckpt_path=X: using PATH`).
fn chosen_step(dir: &Path, stderr: &str) -> u64 {
    let path = stderr
        .split(": using ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no checkpoint was chosen: {stderr}"));
    let path = dir.join(path);
    let bytes = std::fs::read(&path).unwrap();
    Checkpoint::decode(&bytes, &path)
        .unwrap()
        .header
        .global_step
}

#[test]
fn after_a_power_cut_during_checkpoint_writes_resume_finds_the_newest_complete_checkpoint() {
    let tools = tempfile::tempdir().unwrap();
    let shim = match build_shim(tools.path()).unwrap() {
        Ok(shim) => shim,
        Err(why) => {
            eprintln!("skipped: the power-loss shim needs a C compiler: {why}");
            return;
        }
    };
    let run = tempfile::tempdir().unwrap();
    let root = run.path().canonicalize().unwrap();
    let log = recorded_run(&shim, &root, &tools.path().join("calls.log"));
    let paths = log.paths();
    let during_checkpoint_writes = |i: usize| {
        paths[i]
            .as_ref()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "checkpoints"))
    };

    // Replay every call; after each, what a cut would leave. Crash points are the calls made
    // on checkpoint files and directories once a first checkpoint is durable.
    let mut disk = Disk::new();
    let mut states = Vec::new();
    let mut first_durable = None;
    for (i, op) in log.0.iter().enumerate() {
        disk.apply(op).unwrap();
        let complete = complete_checkpoints(&disk);
        if first_durable.is_none() && !complete.is_empty() {
            first_durable = Some(i);
        }
        if first_durable.is_some() && during_checkpoint_writes(i) {
            states.push((i, disk.clone(), complete));
        }
    }
    assert!(
        states.len() >= CRASH_POINTS,
        "only {} calls on checkpoints to cut at",
        states.len()
    );
    let picked: Vec<_> = (0..CRASH_POINTS)
        .map(|k| &states[k * states.len() / CRASH_POINTS])
        .collect();

    let mut resumable = 0;
    for &(i, ref disk, ref complete) in picked {
        let newest = complete.iter().map(|(_, step)| *step).max().unwrap();
        let dir = tempfile::tempdir().unwrap();
        disk.materialize(dir.path()).unwrap();
        for choice in ["last", "best"] {
            let flag = format!("--trainer.ckpt_path={choice}");
            let out = digits(dir.path(), &["validate", &flag]).output().unwrap();
            let text = stderr(&out);
            assert!(
                out.status.success(),
                "cut after call {i} ({:?}), {choice}: {text}",
                log.0[i]
            );
            if choice == "last" {
                assert_eq!(
                    chosen_step(dir.path(), &text),
                    newest,
                    "cut after call {i}: {text}"
                );
            }
        }
        resumable += 1;
    }
    eprintln!(
        "{CRASH_POINTS} crash points, {resumable} resumable (of {} calls on checkpoints after the first was durable, {} in all)",
        states.len(),
        log.0.len()
    );
    assert_eq!(resumable, CRASH_POINTS);
}

#[test]
fn the_simulation_sees_a_missing_directory_fsync() {
    // The control: the same run with the fsync of the checkpoint directory after each rename
    // taken out of the record. A cut then loses every renamed checkpoint, which the simulation
    // must show.
    let tools = tempfile::tempdir().unwrap();
    let Ok(shim) = build_shim(tools.path()).unwrap() else {
        eprintln!("skipped: the power-loss shim needs a C compiler");
        return;
    };
    let run = tempfile::tempdir().unwrap();
    let root = run.path().canonicalize().unwrap();
    let log = recorded_run(&shim, &root, &tools.path().join("calls.log"));
    let paths = log.paths();
    let checkpoint_dir =
        |path: &Option<PathBuf>| path.as_ref().is_some_and(|p| p.ends_with("checkpoints"));
    let without: Vec<Op> = (log.0.iter().zip(&paths))
        .filter(|(op, path)| !(matches!(op, Op::Sync(_)) && checkpoint_dir(path)))
        .map(|(op, _)| op.clone())
        .collect();
    assert!(
        without.len() < log.0.len(),
        "the run synced no checkpoint directory"
    );
    let mut disk = Disk::new();
    for op in &without {
        disk.apply(op).unwrap();
    }
    assert!(
        complete_checkpoints(&disk).is_empty(),
        "without directory fsyncs a checkpoint still survived"
    );
}
