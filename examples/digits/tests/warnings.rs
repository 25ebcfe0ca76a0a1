//! Warnings a user should see, and see plainly: more ranks than cores, and `tracing`'s
//! warnings without terminal colours when stderr is not a terminal (a log file, CI).

use ember_acceptance::{mpirun_available, run_cpu_only};

#[test]
fn more_ranks_than_cores_is_said() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if !mpirun_available() || cores > 4 {
        eprintln!(
            "skipped: needs OpenMPI and at most 4 cores ({cores} here) to oversubscribe cheaply"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let devices = format!("--trainer.devices={}", cores + 1);
    let args = [
        "fit",
        &devices,
        "--trainer.max_steps=2",
        "--trainer.enable_progress_bar=false",
    ];
    let out = run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said = format!("starts {} processes on {cores} cores", cores + 1);
    assert!(
        stderr.contains(&said) && stderr.contains("oversubscribed"),
        "{stderr}"
    );
}

#[test]
fn tracing_warnings_carry_no_colour_codes_into_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    // `last` skips a file that is not a checkpoint with a `tracing` warning.
    let checkpoints = dir.path().join("checkpoints");
    std::fs::create_dir(&checkpoints).unwrap();
    std::fs::write(checkpoints.join("junk.ckpt"), b"junk").unwrap();
    let args = [
        "fit",
        "--trainer.max_steps=1",
        "--trainer.ckpt_path=last",
        "--trainer.enable_progress_bar=false",
    ];
    let out = run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("skipping") && stderr.contains("junk.ckpt"),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "colour codes: {stderr:?}");
}
