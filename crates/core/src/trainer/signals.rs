//! Graceful stops: SIGTERM and SIGUSR1 (what SLURM sends before it pre-empts a job) and a
//! first SIGINT make `fit` finish the current step, write a checkpoint and return; a second
//! SIGINT ends the process at once (exit status 130).
//!
//! The handlers are installed once per process. Outside `fit` they run the signal's default
//! action (signal-hook cannot give the original handler back, and an unregistered signal would
//! be ignored), so Ctrl-C still ends a program between fits. The CLI starts watching before a
//! fit's start-up ([`keep_for_fit`]): a signal then is kept for the fit, which stops after its
//! first step.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// Flags the handlers write.
struct Flags {
    /// No `fit` is watching or about to: run the default action.
    idle: Arc<AtomicBool>,
    /// A SIGINT arrived for this `fit`; the next one exits.
    interrupted: Arc<AtomicBool>,
    /// The stop signal received for this `fit` (0: none).
    received: Arc<AtomicUsize>,
}

fn install() -> std::io::Result<Flags> {
    let flags = Flags {
        idle: Arc::new(AtomicBool::new(true)),
        interrupted: Arc::new(AtomicBool::new(false)),
        received: Arc::new(AtomicUsize::new(0)),
    };
    // Handlers run in registration order.
    for signal in [SIGINT, SIGTERM, SIGUSR1] {
        signal_hook::flag::register_conditional_default(signal, Arc::clone(&flags.idle))?;
        if signal == SIGINT {
            signal_hook::flag::register_conditional_shutdown(
                SIGINT,
                130,
                Arc::clone(&flags.interrupted),
            )?;
            signal_hook::flag::register(SIGINT, Arc::clone(&flags.interrupted))?;
        }
        signal_hook::flag::register_usize(signal, Arc::clone(&flags.received), signal as usize)?;
    }
    Ok(flags)
}

/// The process's stop flags, their handlers installed on first use (signal handlers are per
/// process, so the flags are too).
fn flags() -> anyhow::Result<&'static Flags> {
    static FLAGS: OnceLock<Result<Flags, String>> = OnceLock::new();
    FLAGS
        .get_or_init(|| install().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("cannot install the stop-signal handlers: {e}"))
}

/// From now on, a stop signal is kept for the next `fit` instead of running its default action.
/// The CLI calls it before a fit's start-up (joining the other ranks, building the model,
/// loading the data): SLURM may send `--signal=USR1@N` up to a minute early, and a job signalled
/// while it starts then stops after its first step with a checkpoint (and requeues) rather than
/// dying. The fit's end gives the signals their default action back.
pub fn keep_for_fit() -> anyhow::Result<()> {
    flags()?.idle.store(false, Ordering::SeqCst);
    Ok(())
}

/// The names [`StopSignals::received`] returns.
pub const NAMES: [&str; 3] = ["SIGINT", "SIGTERM", "SIGUSR1"];

/// Watches for stop signals while it lives (during `fit`).
pub struct StopSignals {
    flags: &'static Flags,
}

impl StopSignals {
    /// Starts watching; a signal kept since [`keep_for_fit`] counts as received.
    pub fn install() -> anyhow::Result<Self> {
        let flags = flags()?;
        flags.idle.store(false, Ordering::SeqCst);
        Ok(Self { flags })
    }

    /// The name of the stop signal received, if one was.
    pub fn received(&self) -> Option<&'static str> {
        match i32::try_from(self.flags.received.load(Ordering::Relaxed)).ok()? {
            SIGINT => Some(NAMES[0]),
            SIGTERM => Some(NAMES[1]),
            SIGUSR1 => Some(NAMES[2]),
            _ => None,
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        self.flags.idle.store(true, Ordering::SeqCst);
        self.flags.received.store(0, Ordering::SeqCst);
        self.flags.interrupted.store(false, Ordering::SeqCst);
    }
}
