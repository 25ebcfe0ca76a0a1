//! A fit that fails shows the failure to the callbacks (`on_exception`) while the loop still
//! holds the model, optimizer and counters of the last completed step, so that one of them
//! (OnExceptionCheckpoint) may save a checkpoint to resume from: an error from the data, a
//! callback, validation or a logger, or a panic in `training_step`. A failure inside the
//! optimizer step (or a manual `manual_training_step`), which holds the model, reaches the
//! callbacks afterwards without it, as any failure outside `fit` does. The loops mark the calls
//! that may fail with `tried!` (in `loops/mod.rs`).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use burn::tensor::backend::AutodiffBackend;

use super::fit::FitLoop;
use crate::callbacks::{Callback, CallbackContext};
use crate::trainer::data::panic_message;
use crate::trainer::module::TrainingModule;

impl<B, M> FitLoop<'_, B, M>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    /// Runs every callback's `on_exception` for `error`, with a checkpoint saver over the
    /// model as it is, and waits for the checkpoint writes it asked for; returns the error.
    /// Under a strategy that shards the optimizer's state no checkpoint can be saved (it is
    /// gathered from every rank, and the others are not here to give theirs).
    pub(super) fn failed(&mut self, error: anyhow::Error) -> anyhow::Error {
        self.run.failure_reported = true;
        let report = |c: &mut dyn Callback, x: &mut CallbackContext<'_>| {
            c.on_exception(x, &error);
            Ok(())
        };
        let shown = match self.gather {
            None => self.fit_hook(report),
            Some(_) => self.run.hook(report),
        };
        let written = self.run.checkpoint_io.wait();
        if let Err(e) = shown.and(written) {
            eprintln!("warning: after the failure, the callbacks failed too: {e:#}");
        }
        error
    }

    /// `f` on the loop; if it panics, the callbacks see the panic as an error (as
    /// [`failed`](Self::failed)) and the panic goes on.
    pub(super) fn unless_panics<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(value) => value,
            Err(panic) => {
                let error = anyhow::anyhow!("training_step panicked: {}", panic_message(&*panic));
                self.failed(error);
                resume_unwind(panic)
            }
        }
    }
}
