//! The local launcher's loop: starts a multi-process run through the engine and, with
//! `--trainer.max_restarts=N`, starts every rank again from the last checkpoint when one
//! fails, as torchrun's `--max-restarts` does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

use super::CliOutcome;
use crate::collective::Engine;
use crate::plan::Plan;

/// What a restart adds to the arguments: resume from the checkpoint with the most steps in the
/// run's checkpoint directories (none yet: start from scratch, with a notice). A later flag wins
/// over an earlier one, so it also replaces a `ckpt_path` the first start was given.
const RESUME: &str = "--trainer.ckpt_path=last";

/// Exit status of bad input: a restart would meet the same input again.
const BAD_INPUT: i32 = 2;

/// Starts the ranks of a local multi-process run through the engine's launcher, and again
/// from the last checkpoint each time a rank fails, at most `max_restarts` times. A run that a
/// stop signal to this process ended, or that failed on bad input, is not restarted.
pub(super) fn launch<O>(
    engine: &dyn Engine,
    plan: &Plan,
    args: &[String],
    max_restarts: u64,
) -> CliOutcome<O> {
    if plan.num_nodes > 1 {
        return CliOutcome::Failed {
            code: 2,
            message: format!(
                "--trainer.num_nodes={} with no cluster environment: ember's launcher starts ranks on this machine only; \
                 start every rank with mpirun (--host or a hostfile) or srun, which set the rank environment",
                plan.num_nodes
            ),
        };
    }
    let stop = match StopRequests::watch(max_restarts > 0) {
        Ok(stop) => stop,
        Err(e) => return CliOutcome::failed(format!("cannot watch for stop signals: {e}")),
    };
    let mut args = args.to_vec();
    let mut restarts = 0;
    loop {
        let code = match engine.launch(plan, &args) {
            Ok(code) => code,
            Err(e) => return CliOutcome::failed(format!("{e:#}")),
        };
        let why_not = match code {
            0 => None,
            _ if max_restarts == 0 => None,
            BAD_INPUT => Some("exit status 2 is bad input, which a restart would meet again"),
            _ if stop.requested() => Some("this process was asked to stop"),
            _ if restarts == max_restarts => Some("no restarts left"),
            _ => {
                restarts += 1;
                eprintln!(
                    "ember: a rank failed (exit status {code}); restarting every rank from the last checkpoint \
                     (restart {restarts} of --trainer.max_restarts={max_restarts})"
                );
                if restarts == 1 {
                    args.push(RESUME.to_owned());
                }
                continue;
            }
        };
        if let Some(reason) = why_not {
            eprintln!("ember: not restarting the failed run: {reason}");
        }
        return CliOutcome::Launched {
            code: u8::try_from(code).unwrap_or(1),
        };
    }
}

/// Whether this process received a stop signal (SIGTERM, SIGUSR1, SIGINT) while the ranks ran:
/// the engine passes the stop on to them, and the run then ends without a restart.
struct StopRequests(Arc<AtomicBool>);

impl StopRequests {
    /// Starts watching when `watch` (restarts are on); otherwise the signals keep their
    /// handling and none is ever recorded.
    fn watch(watch: bool) -> std::io::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        if watch {
            for signal in [SIGTERM, SIGUSR1, SIGINT] {
                signal_hook::flag::register(signal, Arc::clone(&flag))?;
            }
        }
        Ok(Self(flag))
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
