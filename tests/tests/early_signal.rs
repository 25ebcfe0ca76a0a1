//! A stop signal that comes while a fit starts up (joining the ranks, building the model,
//! loading the data) is kept for the fit: a SLURM job signalled that early (SLURM may send
//! `--signal=USR1@N` up to a minute before the time it names) stops after its first step with a
//! checkpoint and requeues itself, instead of being killed by the signal.

// wide_adam trains on cpu whatever backend the suite is built with: the matrix's cpu row runs
// this test, and a backend row (built with that backend's feature) would only repeat it.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ember_acceptance::process::{in_a_fake_slurm_job, quiet, scontrol_asked};

/// SIGUSR1's number on Linux.
const SIGUSR1: u32 = 10;

/// Whether process `pid` has a handler for signal `signal` (the `SigCgt` mask in /proc).
fn catches(pid: u32, signal: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (signal - 1)) != 0)
}

#[test]
fn a_sigusr1_during_start_up_stops_the_fit_after_its_first_step_and_requeues_the_job() {
    let dir = tempfile::tempdir().unwrap();
    // 400 000 generated samples: seconds of start-up before the first step.
    let fit = ["fit", "--data.samples=400000", "--trainer.max_epochs=1"];
    let mut wide = quiet(env!("CARGO_BIN_EXE_wide_adam"), dir.path(), &fit);
    wide.stdout(Stdio::piped()).stderr(Stdio::piped());
    in_a_fake_slurm_job(&mut wide, dir.path());
    let child = wide.spawn().unwrap();
    // The signal goes once the program handles it (milliseconds after it starts), and at the
    // latest after 1.5 s, while the data is still being made: a program that installed its
    // handlers only when the fit starts would be killed by it.
    let spawned = Instant::now();
    while !catches(child.id(), SIGUSR1) && spawned.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let sent = Command::new("kill")
        .args(["-USR1", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("received SIGUSR1: stopped after step 1,"),
        "{stderr}"
    );
    let asked = scontrol_asked(dir.path());
    assert_eq!(asked.as_deref(), Some("requeue 4242"), "{stderr}");
}
