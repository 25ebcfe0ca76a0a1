//! Requeueing a scheduled job after a SIGUSR1 stop (`--trainer.auto_requeue`), as Lightning's
//! `SLURMEnvironment(auto_requeue=True)` does: the cluster environment names the command
//! (SLURM: `scontrol requeue JOB`), rank 0 runs it once the stop's checkpoint is written.

use std::process::Command;

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;

use super::Trainer;
use crate::cluster::Env;

/// The stop signal that asks for a requeue: what `#SBATCH --signal=USR1@SECONDS` sends before
/// the time limit (SIGTERM, a cancellation or pre-emption, only stops).
pub(super) const REQUEUE_SIGNAL: &str = "SIGUSR1";

impl<B: AutodiffBackend> Trainer<B> {
    /// Asks the scheduler to run this job again, when `signal` is the requeue signal,
    /// `auto_requeue` is on and the cluster environment can (rank 0 only; the checkpoint the
    /// stop asked for is written). A command that fails is an error: the job would otherwise
    /// end as if it had finished.
    pub(super) fn requeue_after(&self, signal: &str) -> anyhow::Result<()> {
        if signal != REQUEUE_SIGNAL || !self.options.auto_requeue || !self.is_global_zero() {
            return Ok(());
        }
        let env: Env = std::env::vars().collect();
        let Some(command) = (self.cluster.as_ref()).and_then(|c| c.requeue_command(&env)) else {
            return Ok(());
        };
        let shown = command.join(" ");
        let (program, args) = command.split_first().context("an empty requeue command")?;
        // Said first: the scheduler may stop this process as it requeues the job, before the
        // command's status comes back.
        eprintln!("requeueing the job (`{shown}`)");
        let status = Command::new(program)
            .args(args)
            .status()
            .with_context(|| format!("cannot run `{shown}` to requeue the job"))?;
        anyhow::ensure!(
            status.success(),
            "`{shown}` failed ({status}): the job was not requeued (--trainer.auto_requeue=false stops without requeueing)"
        );
        eprintln!("requeued the job (`{shown}`); it resumes with --trainer.ckpt_path=last");
        Ok(())
    }
}
