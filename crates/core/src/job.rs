//! Jobs: work that is generic over the accelerator and run by name.

use crate::accelerator::Accelerator;
use crate::context::RunContext;

/// What the CLI or a user's program wants run, written once for every accelerator.
///
/// The registry monomorphizes `run::<A>` for each registered accelerator `A` when it is
/// registered, so `--trainer.accelerator=NAME` can pick the instance at run time.
pub trait Job {
    /// What a successful run returns.
    type Output;

    /// Runs on accelerator `A` as `context.plan` says, with the context's collective and
    /// registered plugins (build the Trainer with `Trainer::builder_for(context, options)`).
    fn run<A: Accelerator>(self, context: &RunContext) -> anyhow::Result<Self::Output>;
}
