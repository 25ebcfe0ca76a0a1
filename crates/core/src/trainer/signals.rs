//! Graceful stops: SIGTERM and SIGUSR1 (what SLURM sends before it pre-empts a job) and a
//! first SIGINT make `fit` finish the current step, write a checkpoint and return; a second
//! SIGINT ends the process at once (exit status 130).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use signal_hook::SigId;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// The stop signals, watched while `fit` runs (the handlers are removed when it is dropped).
pub struct StopSignals {
    received: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

impl StopSignals {
    /// Starts watching.
    pub fn install() -> anyhow::Result<Self> {
        let received = Arc::new(AtomicUsize::new(0));
        let interrupted = Arc::new(AtomicBool::new(false));
        // Handlers run in the order they were registered: a SIGINT that finds `interrupted`
        // already set exits before it is recorded again.
        let mut ids = vec![
            signal_hook::flag::register_conditional_shutdown(
                SIGINT,
                130,
                Arc::clone(&interrupted),
            )?,
            signal_hook::flag::register(SIGINT, interrupted)?,
        ];
        for signal in [SIGINT, SIGTERM, SIGUSR1] {
            ids.push(signal_hook::flag::register_usize(
                signal,
                Arc::clone(&received),
                signal as usize,
            )?);
        }
        Ok(Self { received, ids })
    }

    /// The name of the stop signal received, if one was.
    pub fn received(&self) -> Option<&'static str> {
        match i32::try_from(self.received.load(Ordering::Relaxed)).ok()? {
            SIGINT => Some("SIGINT"),
            SIGTERM => Some("SIGTERM"),
            SIGUSR1 => Some("SIGUSR1"),
            _ => None,
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
