//! Checkpoint files across runs of the digits binary: `--trainer.ckpt_path=last|best`, and
//! ModelCheckpoint never removing a file another run wrote (Lightning restores its top-k
//! state only when the checkpoint was written to the folder it writes to now).

use std::path::{Path, PathBuf};
use std::process::Output;

use ember::checkpoint::Checkpoint;
use ember_acceptance::{mpirun_available, run_cpu_only};

const VERSION_0: &str = "lightning_logs/version_0/checkpoints";
const VERSION_1: &str = "lightning_logs/version_1/checkpoints";

fn digits_in(dir: &Path, args: &[&str]) -> Output {
    run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir, args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that a run exited with `code` and said `needle` on stderr.
fn fails_with(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    assert!(stderr(out).contains(needle), "{}", stderr(out));
}

/// The `.ckpt` files in `dir`, sorted.
fn ckpt_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ckpt"))
        .collect();
    files.sort();
    files
}

/// Every checkpoint in `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    ckpt_files(dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The issue's reproduction, with `extra` flags (ddp, a top-k by a metric): fit one epoch,
/// resume from `last` for a second; the first run's checkpoints are all still there, unchanged,
/// and the second run wrote its own (epochs of `steps` steps). Returns the second run's stdout.
fn resuming_keeps_the_first_runs_files(extra: &[&str], steps: u64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let fit = |more: &[&str]| {
        let out = digits_in(dir.path(), &[&["fit"][..], extra, more].concat());
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    fit(&["--trainer.max_epochs=1"]);
    let before = snapshot(&dir.path().join(VERSION_0));
    assert!(!before.is_empty(), "the first run wrote no checkpoint");
    let out = fit(&["--trainer.max_epochs=2", "--trainer.ckpt_path=last"]);
    assert!(
        stderr(&out).contains("are not restored (only best_model_path)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        snapshot(&dir.path().join(VERSION_0)),
        before,
        "resuming changed the checkpoints it came from"
    );
    let names: Vec<String> = ckpt_files(&dir.path().join(VERSION_1))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [format!("epoch=1-step={}.ckpt", 2 * steps)]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn resuming_into_a_new_version_leaves_every_earlier_checkpoint() {
    resuming_keeps_the_first_runs_files(&[], 23);
    let by_val_loss = r#"--trainer.callbacks=[{"class_path": "ModelCheckpoint", "init_args": {"monitor": "val_loss", "save_top_k": 1}}]"#;
    resuming_keeps_the_first_runs_files(&[by_val_loss], 23);
}

#[test]
fn resuming_under_ddp_leaves_every_earlier_checkpoint() {
    if !mpirun_available() {
        return;
    }
    // 23 batches of the training split in 2 shards: 12 steps an epoch.
    let stdout = resuming_keeps_the_first_runs_files(&["--trainer.devices=2"], 12);
    assert!(
        stdout.contains("trained 12 steps (to global step 24) in")
            && stdout.contains("on cpu (2 processes)"),
        "{stdout}"
    );
}

/// The summary line counts this run's steps (and its rate from them), with the global step
/// beside them when the run resumed.
#[test]
fn the_summary_counts_the_steps_this_run_took() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits_in(dir.path(), &["fit", "--trainer.max_steps=5"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.starts_with("trained 5 steps in "), "{stdout}");
    let out = digits_in(
        dir.path(),
        &["fit", "--trainer.max_steps=6", "--trainer.ckpt_path=last"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.starts_with("trained 1 step (to global step 6) in "),
        "{stdout}"
    );
}

/// With one `dirpath` for both runs the folder is the resumed run's own: its state comes back
/// whole and top-k rotation removes the superseded file, as Lightning's does.
#[test]
fn top_k_rotation_still_removes_its_own_files_in_the_same_folder() {
    let dir = tempfile::tempdir().unwrap();
    let callbacks = r#"--trainer.callbacks=[{"class_path": "ModelCheckpoint", "init_args": {"dirpath": "ckpts"}}]"#;
    let fit = |more: &[&str]| {
        let out = digits_in(dir.path(), &[&["fit", callbacks][..], more].concat());
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    fit(&["--trainer.max_epochs=1"]);
    let ckpts = dir.path().join("ckpts");
    assert_eq!(ckpt_files(&ckpts), [ckpts.join("epoch=0-step=23.ckpt")]);
    let out = fit(&["--trainer.max_epochs=2", "--trainer.ckpt_path=last"]);
    assert!(!stderr(&out).contains("not restored"), "{}", stderr(&out));
    assert_eq!(ckpt_files(&ckpts), [ckpts.join("epoch=1-step=46.ckpt")]);
}

#[test]
fn ckpt_path_last_resumes_with_callback_states_and_best_evaluates_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let callbacks = r#"--trainer.callbacks=[{"class_path": "ModelCheckpoint", "init_args": {"monitor": "val_acc", "mode": "max", "save_top_k": 2}}, {"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 50}}]"#;
    let out = digits_in(
        dir.path(),
        &[
            "fit",
            "--trainer.max_epochs=3",
            "--trainer.seed=3",
            callbacks,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // The newest checkpoint carries both callbacks' states and the seed.
    let first = dir.path().join(VERSION_0);
    let newest = std::fs::read_dir(&first)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("epoch=2-"))
        .expect("the last epoch's checkpoint is among the top 2");
    let checkpoint = Checkpoint::decode(&std::fs::read(&newest).unwrap(), &newest).unwrap();
    assert_eq!(checkpoint.header.seed, 3);
    let states: serde_json::Value =
        serde_json::from_slice(&checkpoint.sections["callbacks"]).unwrap();
    let keys: Vec<&String> = states.as_object().unwrap().keys().collect();
    assert!(
        keys.iter()
            .any(|k| k.starts_with("EarlyStopping{monitor=val_loss"))
            && keys
                .iter()
                .any(|k| k.starts_with("ModelCheckpoint{monitor=val_acc")),
        "{keys:?}"
    );
    let kept = states
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("ModelCheckpoint"))
        .map(|(_, v)| v["kept"].as_array().unwrap().len())
        .unwrap();
    assert_eq!(kept, 2, "{states}");

    // `last` picks that checkpoint (without --trainer.seed: the run's own seed comes back).
    let out = digits_in(
        dir.path(),
        &[
            "fit",
            "--trainer.max_epochs=5",
            "--trainer.ckpt_path=last",
            callbacks,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let relative = newest.strip_prefix(dir.path()).unwrap();
    assert!(
        stderr(&out).contains(&format!(
            "--trainer.ckpt_path=last: using ./{}\n  (the checkpoint with the most optimizer steps, 69,",
            relative.display()
        )),
        "the choice and why (Lightning's `last` is the newest file): {}",
        stderr(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("trained 46 steps (to global step 115) in"),
        "2 more epochs of 23 steps, 5 in all: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The resumed run writes to version_1: version_0's files are not its to rotate.
    assert_eq!(ckpt_files(&first).len(), 2, "version_0 lost a checkpoint");

    // `best` evaluates the best checkpoint the resumed run's ModelCheckpoint knows: its own
    // (the earlier run's best score is not restored into another folder, as in Lightning).
    let out = digits_in(dir.path(), &["test", "--trainer.ckpt_path=best"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let used = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("--trainer.ckpt_path=best: using "))
        .map(|p| dir.path().join(p).canonicalize().unwrap())
        .unwrap_or_else(|| panic!("{}", stderr(&out)));
    let all: Vec<(f64, PathBuf)> = ckpt_files(&dir.path().join(VERSION_1))
        .into_iter()
        .map(|p| {
            let c = Checkpoint::decode(&std::fs::read(&p).unwrap(), &p).unwrap();
            (c.header.metrics["val_acc"], p)
        })
        .collect();
    let best = all
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p)| p.canonicalize().unwrap())
        .unwrap();
    assert_eq!(used, best, "{all:?}");

    let out = digits_in(
        tempfile::tempdir().unwrap().path(),
        &["test", "--trainer.ckpt_path=best"],
    );
    fails_with(
        &out,
        2,
        "invalid --trainer.ckpt_path value `best`: no checkpoint in",
    );
}

/// `last` where no run has written a checkpoint yet loads nothing, with a notice, as Lightning
/// does ("not an error so it can be set and forget before the first fit run",
/// `_CheckpointConnector._parse_ckpt_path`): one command line serves the first run and every
/// run that continues it (a requeued cluster job).
#[test]
fn last_on_a_fresh_start_starts_from_scratch_and_then_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let fit = |epochs: &str| {
        let max_epochs = format!("--trainer.max_epochs={epochs}");
        let args = [
            "fit",
            &max_epochs,
            "--trainer.ckpt_path=last",
            "--trainer.enable_progress_bar=false",
        ];
        let out = digits_in(dir.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let first = fit("1");
    let notice = "--trainer.ckpt_path=last: no checkpoint yet under .; starting without one";
    assert!(stderr(&first).contains(notice), "{}", stderr(&first));
    assert!(String::from_utf8_lossy(&first.stdout).starts_with("trained 23 steps in"));
    let second = fit("2");
    assert!(
        stderr(&second).contains("--trainer.ckpt_path=last: using"),
        "{}",
        stderr(&second)
    );
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(
        stdout.starts_with("trained 23 steps (to global step 46)"),
        "{stdout}"
    );
    // validate/test/predict load nothing either, and say so.
    let empty = tempfile::tempdir().unwrap();
    let out = digits_in(empty.path(), &["test", "--trainer.ckpt_path=last"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(notice), "{}", stderr(&out));
}

/// The optimizer's state comes back in the f32 of the master weights (bitwise resume under
/// mixed precisions: tests/resume_mixed.rs).
#[test]
fn a_mixed_precision_run_resumes_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "fit",
        "--trainer.precision=bf16-mixed",
        "--trainer.max_steps=5",
    ];
    let out = digits_in(dir.path(), &flags);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = digits_in(
        dir.path(),
        &[
            "fit",
            "--trainer.precision=bf16-mixed",
            "--trainer.max_steps=10",
            "--trainer.ckpt_path=last",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("trained 5 steps (to global step 10)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
