//! Runs that carry on by themselves, with real ranks, ending bitwise where an uninterrupted run
//! ends: `--trainer.max_restarts` (a rank killed during a 2-rank run makes the local launcher
//! start every rank again from the last checkpoint) and SLURM's auto-requeue (a batch job
//! signalled before its time limit saves, requeues itself and resumes).

// Digits trains on cpu in these tests whatever backend it is built with: the matrix's cpu row
// runs them, and a backend row (digits built with that backend's feature) would only repeat them.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use burn_flex::{Flex, FlexDevice};
use digits::model::{DigitsModel, ModelConfig};
use ember::checkpoint::Checkpoint;
use ember_acceptance::mpirun_available;
use ember_acceptance::process::{
    QUIET, in_a_fake_slurm_job, quiet, ranks_of, ranks_turn, scontrol_asked, signal_at_line,
};
use ember_acceptance::resume::float_bytes;

const RUN: [&str; 4] = [
    "fit",
    "--trainer.devices=2",
    "--trainer.seed=42",
    "--trainer.num_sanity_val_steps=0",
];

/// 150 epochs of 12 steps: a few seconds.
const SHORT: &str = "--trainer.max_epochs=150";

fn digits(dir: &Path, extra: &[&str]) -> Command {
    let mut command = quiet(
        env!("CARGO_BIN_EXE_digits"),
        dir,
        &[&RUN[..], extra].concat(),
    );
    command.env("RAYON_NUM_THREADS", "1");
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

/// The final checkpoint of the run in `dir`: the one at global step `step`.
fn final_checkpoint(dir: &Path, step: u64) -> PathBuf {
    let files = checkpoints(dir);
    let name = format!("step={step}.ckpt");
    let last = files.iter().find(|p| p.to_string_lossy().ends_with(&name));
    last.unwrap_or_else(|| panic!("no final checkpoint among {files:?}"))
        .clone()
}

#[test]
fn a_killed_rank_restarts_the_run_from_its_last_checkpoint_and_it_ends_bitwise_uninterrupted() {
    if !mpirun_available() {
        return;
    }
    let _turn = ranks_turn();
    let whole = tempfile::tempdir().unwrap();
    let out = digits(whole.path(), &[SHORT]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let mut launcher = digits(dir.path(), &[SHORT, "--trainer.max_restarts=1"])
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
    let resumed = final_checkpoint(dir.path(), 1800);
    assert!(
        !resumed.starts_with(dir.path().join("lightning_logs/version_0")),
        "the run finished before the kill: {resumed:?}"
    );
    assert!(
        weights(&resumed) == weights(&final_checkpoint(whole.path(), 1800)),
        "the restarted run's weights differ from the uninterrupted run's"
    );
}

#[test]
fn a_slurm_job_signalled_before_its_time_limit_requeues_itself_and_ends_bitwise_uninterrupted() {
    if !mpirun_available() {
        return;
    }
    let _turn = ranks_turn();
    // 2000 epochs of 12 steps, longer than SLURM takes to send the signal on any host (10 to
    // 40 s after the first start here with a one-minute limit signalled 20 s before its end;
    // not sooner, so that the ranks are training when it comes). Once requeued, the script
    // gives the job ten minutes and ends it at the first checkpoint the resumed run writes
    // (every 25 epochs, all kept): that one is compared with an uninterrupted run of as many
    // epochs, so the test trains about as long as the signal takes, however fast the host.
    let kept = r#"--trainer.callbacks=[{"class_path": "ModelCheckpoint", "init_args": {"save_top_k": -1, "every_n_epochs": 25}}]"#;
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-slurm.sh");
    let out = Command::new(script)
        .args(["--requeue", "20", "--until"])
        .arg("lightning_logs/*/checkpoints/epoch=*.ckpt")
        .arg(env!("CARGO_BIN_EXE_digits"))
        .args(RUN)
        .args(QUIET)
        .args([
            "--trainer.max_epochs=2000",
            kept,
            "--trainer.ckpt_path=last",
        ])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if out.status.code() == Some(77) {
        eprintln!("{}", stderr.trim());
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let requeued: u32 = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("requeued ")?
                .strip_suffix(" times")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(requeued >= 1, "the job was never requeued: {stdout}");
    // The job says so before SLURM stops it (its "requeued the job" after the command can be
    // cut off by the requeue); SLURM's restart count above says the requeue happened.
    assert!(
        stdout.contains("requeueing the job (`scontrol requeue "),
        "{stdout}"
    );

    // The resumed run's first checkpoint, written after the one the signal's stop saved.
    let reached = stdout
        .lines()
        .find_map(|l| l.strip_prefix("reached "))
        .unwrap_or_else(|| {
            panic!("the job ended before the resumed run saved:\n{stdout}\n{stderr}")
        });
    let reached = dir.path().join(reached);
    let (epoch, step) = position(&reached);
    let files = checkpoints(dir.path());
    let stopped = files
        .iter()
        .find(|p| p.to_string_lossy().contains("/sigusr1-epoch="))
        .unwrap_or_else(|| panic!("no checkpoint of the signal's stop among {files:?}"));
    // The same step only if the signal stopped the run after an epoch's last step and the
    // resumed run then saved that epoch's checkpoint.
    assert!(
        position(stopped).1 <= step,
        "{reached:?} is before {stopped:?}"
    );

    let whole = tempfile::tempdir().unwrap();
    let epochs = format!("--trainer.max_epochs={}", epoch + 1);
    let uninterrupted = digits(whole.path(), &[&epochs, kept]).output().unwrap();
    assert!(
        uninterrupted.status.success(),
        "{}",
        String::from_utf8_lossy(&uninterrupted.stderr)
    );
    assert!(
        weights(&reached) == weights(&final_checkpoint(whole.path(), step)),
        "the requeued job's weights at step {step} differ from the uninterrupted run's"
    );
}

/// The epoch (0-based) and the global step a checkpoint was written at, from its header.
fn position(path: &Path) -> (u64, u64) {
    let bytes = std::fs::read(path).unwrap();
    let header = Checkpoint::decode(&bytes, path).unwrap().header;
    (header.epoch, header.global_step)
}

/// Digits trained in a one-task SLURM job (see [`in_a_fake_slurm_job`]) until `signal` stops
/// it: what its `scontrol` was asked, if anything, and the run's stderr after the signal.
fn stopped_in_a_slurm_job(dir: &Path, signal: &str, extra: &[&str]) -> (Option<String>, String) {
    let mut digits = Command::new(env!("CARGO_BIN_EXE_digits"));
    digits
        // The progress bar's epoch lines say when training has begun.
        .args(["fit", "--trainer.max_epochs=100000"])
        .args(extra)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "");
    in_a_fake_slurm_job(&mut digits, dir);
    let (status, stderr) = signal_at_line(digits, "epoch 2", signal);
    assert!(status.success(), "SIG{signal}: {status:?}: {stderr}");
    (scontrol_asked(dir), stderr)
}

#[test]
fn only_sigusr1_requeues_and_auto_requeue_false_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let (asked, stderr) = stopped_in_a_slurm_job(dir.path(), "USR1", &[]);
    assert_eq!(asked.as_deref(), Some("requeue 4242"), "{stderr}");
    assert!(
        stderr.contains("requeueing the job (`scontrol requeue 4242`)")
            && stderr.contains("requeued the job (`scontrol requeue 4242`)"),
        "{stderr}"
    );
    for (signal, extra) in [
        ("TERM", &[][..]),
        ("USR1", &["--trainer.auto_requeue=false"][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (asked, stderr) = stopped_in_a_slurm_job(dir.path(), signal, extra);
        assert_eq!(asked, None, "SIG{signal} {extra:?}: {stderr}");
        assert!(stderr.contains("checkpoint saved to"), "{stderr}");
    }
}

/// Runs digits with `args` in `dir` (no launcher options of [`RUN`]); its summary line.
fn summary(dir: &Path, args: &[&str]) -> String {
    let out = quiet(env!("CARGO_BIN_EXE_digits"), dir, args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_restart_with_fewer_ranks_continues_from_the_same_checkpoint() {
    if !mpirun_available() {
        return;
    }
    let _turn = ranks_turn();
    // 1437 training samples in batches of 64: 23 batches an epoch in one process, 12 on each
    // of two ranks.
    let dir = tempfile::tempdir().unwrap();
    let two = summary(
        dir.path(),
        &["fit", "--trainer.devices=2", "--trainer.max_epochs=4"],
    );
    assert!(two.contains("trained 48 steps"), "{two}");
    // Written at an epoch's end by 2 ranks: one process starts the next epoch.
    let resume = ["fit", "--trainer.devices=1", "--trainer.ckpt_path=last"];
    let one = summary(
        dir.path(),
        &[&resume[..], &["--trainer.max_epochs=6"]].concat(),
    );
    assert!(
        one.contains("trained 46 steps (to global step 94)"),
        "{one}"
    );

    // Written 6 batches into an epoch on each of 2 ranks: the epoch's first 12 batches' worth,
    // so one process has 11 of its 23 left.
    let dir = tempfile::tempdir().unwrap();
    let two = summary(
        dir.path(),
        &["fit", "--trainer.devices=2", "--trainer.max_steps=30"],
    );
    assert!(two.contains("trained 30 steps"), "{two}");
    let one = summary(
        dir.path(),
        &[&resume[..], &["--trainer.max_epochs=4"]].concat(),
    );
    assert!(
        one.contains("trained 34 steps (to global step 64)"),
        "{one}"
    );
}
