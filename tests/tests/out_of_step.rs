//! Ranks that fall out of step end the run with ember's message: a strategy whose hook makes
//! a collective call on rank 1 only (`out_of_step`'s `one_sided`), under ember's launcher
//! (mpirun) and under a real SLURM's srun. Every rank stops, the message names each rank's
//! call and the step, once, and MPI's own error never shows.

// out_of_step trains on cpu whatever backend the suite is built with: the matrix's cpu row runs
// this test, and a backend row would only repeat it.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::path::Path;
use std::process::{Command, Output};

use ember_acceptance::mpirun_available;
use ember_acceptance::process::quiet;

const FIT: [&str; 4] = [
    "fit",
    "--trainer.strategy=one_sided",
    "--trainer.devices=2",
    "--trainer.enable_checkpointing=false",
];

/// The run's stdout and stderr together.
fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The run failed with one out-of-step message naming both ranks' calls in the step that
/// began at global step 2 (whose optimizer step is the third).
fn assert_out_of_step(out: &Output) {
    let text = text(out);
    assert!(!out.status.success(), "{text}");
    assert_eq!(
        text.matches("the ranks are out of step").count(),
        1,
        "one message, from rank 0: {text}"
    );
    assert!(
        text.contains("rank 1 called barrier (its call #")
            && text.contains("at global step 2)")
            && text.contains("rank 0 called all_reduce_f"),
        "{text}"
    );
    assert!(!text.contains("MPI_ERR"), "{text}");
}

#[test]
fn a_collective_call_on_one_rank_only_ends_the_run_with_a_message_naming_each_call() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = quiet(env!("CARGO_BIN_EXE_out_of_step"), dir.path(), &FIT)
        .output()
        .unwrap();
    assert_out_of_step(&out);
}

#[test]
fn under_srun_too() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/test-slurm.sh");
    let out = Command::new(script)
        .arg(env!("CARGO_BIN_EXE_out_of_step"))
        .args(FIT)
        .args(ember_acceptance::process::QUIET)
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    if out.status.code() == Some(77) {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr).trim());
        return;
    }
    assert_out_of_step(&out);
}
