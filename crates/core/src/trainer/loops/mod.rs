//! The Trainer's loops, modelled on Lightning's `loops/`: each is an object whose state lives
//! in its struct, and the arithmetic that decides batch counts, steps, validation and stops
//! is plain data ([`schedule`]) apart from any backend.
//!
//! - [`fit::FitLoop`]: restore, sanity check, epochs, teardown (`fit.rs`), one epoch of
//!   training batches and optimizer steps (`training_epoch.rs`);
//! - `batch_norm.rs`: batch-norm statistics recomputed for averaged weights;
//! - [`configure`]: what `configure_optimizers` returned, checked before fit;
//! - [`optimization`]: the optimizers; [`step`]: one optimizer step, automatic or manual;
//! - [`evaluation::EvaluationLoop`]: a validation or test pass;
//! - [`prediction::PredictionLoop`]: predictions, sharded across ranks and gathered back;
//! - [`reload`]: fit's loaders, made again every `reload_dataloaders_every_n_epochs` epochs.

/// `$e`'s value, or, when it is an error, a return of that error once the callbacks saw it
/// with the loop's model (`FitLoop::failed`, failure.rs).
macro_rules! tried {
    ($fit:ident, $e:expr) => {
        match $e {
            Ok(value) => value,
            Err(error) => return Err($fit.failed(error)),
        }
    };
}

mod batch_norm;
pub(super) mod configure;
pub(super) mod evaluation;
mod failure;
pub(super) mod fit;
pub(crate) mod optimization;
pub(super) mod prediction;
pub(super) mod reload;
mod restore;
pub mod schedule;
pub(crate) mod step;
mod training_epoch;
