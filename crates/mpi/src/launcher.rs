//! The local launcher: re-executes this program under `mpirun`, one rank per device.
//!
//! OpenMPI cannot join processes that were started one by one into a world without a runtime
//! (its singletons cannot connect without an `ompi-server`), so ember's launcher lets
//! `mpirun` start every rank, as Lightning's subprocess launcher starts its children: the
//! children find themselves in the `mpi` cluster environment and launch nothing. When a rank
//! fails, `mpirun` ends the others and reports the failed rank; its exit status is this
//! process's.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use anyhow::Context;
use ember_plan::Plan;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

/// Variable the launcher sets on its children (and which a user may set) to choose the
/// compute threads per rank; see [`mpirun_command`].
const THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// The `mpirun` command that starts `processes` copies of `program args` on this machine.
///
/// It allows oversubscription, binds nothing (ranks share the machine's cores), forwards no
/// standard input (the ranks read none, and a terminal's input stays with the shell), and when
/// `RAYON_NUM_THREADS` is unset gives each rank an equal share of the cores, as torchrun sets
/// `OMP_NUM_THREADS`. It also gives OpenMPI the explicit consent it asks for before running as
/// root (containers, CI), which has no effect for other users.
pub fn mpirun_command(processes: usize, program: PathBuf, args: &[String]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--oversubscribe",
        "--bind-to",
        "none",
        "--stdin",
        "none",
        "-np",
    ])
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
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if processes > cores {
        eprintln!(
            "warning: --trainer.devices={processes} starts {processes} processes on {cores} cores: \
             the cores are oversubscribed (ranks share cores, one compute thread each), so each rank \
             runs slower than on a core of its own"
        );
    }
    let session = SessionBase::create()?;
    let mut command = mpirun_command(processes, program, args);
    // mpirun and the ranks get a process group of their own, so a terminal's Ctrl-C (SIGINT to
    // the whole foreground group) reaches only this process, which stops the ranks gracefully
    // (`wait_forwarding_stops`); mpirun would otherwise end them at once. (In a background
    // group mpirun must not read the terminal: it forwards no stdin.)
    command.process_group(0);
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of this process.
    unsafe {
        // Outside the terminal's group mpirun no longer gets a hangup or a kill meant for the
        // group; it gets SIGTERM (and ends the ranks) when this process dies, however it dies.
        command.pre_exec(
            || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            },
        );
    }
    let mut mpirun = command
        .env("TMPDIR", &session.0)
        .env(AGREED_STATUS_VAR, session.agreed_status_file())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "--trainer.devices={processes} on one machine starts its ranks with OpenMPI's mpirun, which could not run ({e}); \
                 install OpenMPI (Debian: openmpi-bin; scripts/setup.sh does) or start the ranks under a cluster launcher"
            )
        })?;
    let status = wait_forwarding_stops(&mut mpirun)?;
    Ok(match status.code() {
        Some(0) => session.agreed_status()?.map_or(0, i32::from),
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

/// A directory of this launch's own for OpenMPI's session files, removed when dropped.
///
/// OpenMPI 4 creates its session directory (`ompi.<host>.<uid>`) under `TMPDIR` with a `mkdir`
/// that fails ("File exists") when another `mpirun` creates it at the same moment, so two runs
/// started together on one machine could kill each other's start; each launch gets its own base.
struct SessionBase(PathBuf);

/// Variable naming the file where rank 0 of a run whose ranks all stopped on one error leaves
/// its exit status for the launcher ([`stop_together`]).
const AGREED_STATUS_VAR: &str = "EMBER_AGREED_EXIT_STATUS_FILE";

/// A rank's exit status when every rank stopped on one error that rank 0 reported: under
/// ember's launcher, rank 0 leaves `code` in the launcher's file and every rank ends with 0, so
/// that `mpirun` adds no "a process returned a non-zero exit code" report to the one message
/// (and the launcher exits with `code`). Elsewhere (`mpirun` or `srun` started by hand), `code`.
pub(crate) fn stop_together(plan: &Plan, code: u8) -> u8 {
    let Some(file) = std::env::var_os(AGREED_STATUS_VAR) else {
        return code;
    };
    if plan.global_rank != 0 {
        return 0;
    }
    match std::fs::write(&file, code.to_string()) {
        Ok(()) => 0,
        Err(_) => code,
    }
}

impl SessionBase {
    /// Where rank 0 leaves the status of a run its ranks stopped together.
    fn agreed_status_file(&self) -> PathBuf {
        self.0.join("agreed-exit-status")
    }

    /// The status rank 0 left, if the ranks stopped together.
    fn agreed_status(&self) -> anyhow::Result<Option<u8>> {
        let path = self.agreed_status_file();
        match std::fs::read_to_string(&path) {
            Ok(text) => (text.trim().parse().map(Some))
                .with_context(|| format!("{} holds no exit status", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    fn create() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("ember-mpirun-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {} for mpirun", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for SessionBase {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits for `mpirun`, turning the stop signals this process receives into a graceful stop of
/// the ranks: mpirun forwards SIGUSR1 to every rank (it would turn SIGTERM or SIGINT into a
/// kill), so SIGTERM, SIGUSR1 and a first SIGINT go on as SIGUSR1, and every rank's Trainer
/// finishes its step, rank 0 writes the stop checkpoint and the run ends. A second SIGINT goes
/// on as SIGINT: mpirun ends the ranks at once.
fn wait_forwarding_stops(mpirun: &mut Child) -> anyhow::Result<ExitStatus> {
    let mut signals =
        Signals::new([SIGTERM, SIGUSR1, SIGINT]).context("cannot watch for stop signals")?;
    let pid = libc::pid_t::try_from(mpirun.id()).context("mpirun's pid")?;
    let mut stopping = false;
    loop {
        if let Some(status) = mpirun.try_wait()? {
            return Ok(status);
        }
        for signal in signals.pending() {
            let forward = if signal == SIGINT && stopping {
                SIGINT
            } else {
                SIGUSR1
            };
            if !stopping {
                eprintln!(
                    "ember: stopping every rank after its current step (stop signal forwarded to the ranks as SIGUSR1)"
                );
            }
            stopping = true;
            // SAFETY: kill(2) on our own child's pid; it has not been reaped (try_wait above
            // returned None), so the pid still names it.
            unsafe {
                libc::kill(pid, forward);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
