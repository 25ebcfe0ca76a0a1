//! What manual optimization cannot honour is refused before anything runs: exit 2, one message
//! naming the flag, nothing written — in one process, and under two ranks, where the ranks
//! agree on the refusal and rank 0 says it once (no `MPI_ABORT` report from `mpirun`).

use std::path::Path;
use std::process::Output;

use ember_acceptance::{mpirun_available, run_cpu_only};

/// `gan fit ARGS` in `dir`, which it must leave empty: exit 2 with one message naming `flag`.
fn refused(dir: &Path, args: &[&str], flag: &str) {
    let args = [&["fit"], args].concat();
    let out: Output = run_cpu_only(env!("CARGO_BIN_EXE_gan"), dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one message: {stderr}");
    assert!(
        lines[0].starts_with(&format!("error: invalid {flag} value"))
            && lines[0].contains("manual"),
        "{args:?}: {stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "{args:?} wrote {left:?}");
}

#[test]
fn the_learning_rate_finder_is_refused_naming_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    refused(dir.path(), &["--trainer.lr_find=true"], "--trainer.lr_find");
}

#[test]
fn two_ranks_refuse_together_with_one_message() {
    if !mpirun_available() {
        return;
    }
    for (args, flag) in [
        (
            &["--trainer.devices=2", "--trainer.strategy=ddp_sharded"][..],
            "--trainer.strategy",
        ),
        (
            &["--trainer.devices=2", "--trainer.lr_find=true"],
            "--trainer.lr_find",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        refused(dir.path(), args, flag);
    }
}
