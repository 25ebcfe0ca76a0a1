//! The local launcher: re-executes this program under `mpirun`, one rank per device.
//!
//! OpenMPI cannot join processes that were started one by one into a world without a runtime
//! (its singletons cannot connect without an `ompi-server`), so ember's launcher lets
//! `mpirun` start every rank, as Lightning's subprocess launcher starts its children: the
//! children find themselves in the `mpi` cluster environment and launch nothing. When a rank
//! fails, `mpirun` ends the others and reports the failed rank; its exit status is this
//! process's.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use ember_core::Plan;

/// Variable the launcher sets on its children (and which a user may set) to choose the
/// compute threads per rank; see [`mpirun_command`].
const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// The `mpirun` command that starts `processes` copies of `program args` on this machine.
///
/// It allows oversubscription and binds nothing (ranks share the machine's cores), and when
/// `RAYON_NUM_THREADS` is unset gives each rank an equal share of the cores, as torchrun sets
/// `OMP_NUM_THREADS`. It also gives OpenMPI the explicit consent it asks for before running as
/// root (containers, CI), which has no effect for other users.
pub fn mpirun_command(processes: usize, program: PathBuf, args: &[String]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "--bind-to", "none", "-np"])
        .arg(processes.to_string())
        .arg(program)
        .args(args);
    if std::env::var_os(THREADS_VAR).is_none() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        cmd.env(THREADS_VAR, (cores / processes).max(1).to_string());
    }
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}

/// Starts the plan's ranks on this node under `mpirun` and returns the exit code to use.
pub fn launch(plan: &Plan, args: &[String]) -> anyhow::Result<i32> {
    let processes = plan.devices.len();
    let program = std::env::current_exe().context("cannot find this program's path")?;
    tracing::info!(
        target: "ember",
        "starting {processes} ranks of {} under mpirun",
        program.display()
    );
    let status = mpirun_command(processes, program, args)
        .status()
        .map_err(|e| {
            anyhow::anyhow!(
                "--trainer.devices={processes} on one machine starts its ranks with OpenMPI's mpirun, which could not run ({e}); \
                 install OpenMPI (Debian: openmpi-bin; scripts/setup.sh does) or start the ranks under a cluster launcher"
            )
        })?;
    Ok(match status.code() {
        Some(0) => 0,
        Some(code) => {
            eprintln!("error: the ddp run failed: mpirun exited with status {code}");
            code
        }
        None => {
            eprintln!("error: the ddp run failed: mpirun was killed by a signal");
            1
        }
    })
}
