//! What the tests that start themselves under `mpirun` share: a test runs its ranks' side when
//! OpenMPI started it, and otherwise starts itself with `mpirun -np N` and checks their output.

use std::process::Command;

use ember_mpi::mpirun_command;

/// This process's rank and the number of ranks, when `mpirun` started it.
pub fn rank() -> Option<(usize, usize)> {
    let var = |name| std::env::var(name).ok()?.parse().ok();
    Some((var("OMPI_COMM_WORLD_RANK")?, var("OMPI_COMM_WORLD_SIZE")?))
}

/// Runs test `test` of this binary on `ranks` ranks under `mpirun`, with `env` set, and returns
/// what they printed; `None` (after saying the test is skipped) where OpenMPI is not
/// installed. Panics with both outputs when a rank fails.
pub fn run_ranks(test: &str, ranks: usize, env: &[(&str, &str)]) -> Option<String> {
    let found = Command::new("mpirun").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: OpenMPI's mpirun is not installed (scripts/setup.sh installs it)");
        return None;
    }
    let me = std::env::current_exe().expect("the test binary");
    let args = [test, "--exact", "--nocapture", "--test-threads=1"].map(String::from);
    let mut command = mpirun_command(ranks, me, &args);
    let out = command
        .envs(env.iter().copied())
        .output()
        .expect("mpirun runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{ranks} ranks:\n{stdout}\n{stderr}");
    Some(stdout)
}
