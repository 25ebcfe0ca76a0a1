//! Jobs: work that is generic over the accelerator and run by name.

use crate::accelerator::Accelerator;
use crate::plan::Plan;

/// What the CLI or a user's program wants run, written once for every accelerator.
///
/// The registry monomorphizes `run::<A>` for each registered accelerator `A` when it is
/// registered, so `--trainer.accelerator=NAME` can pick the instance at run time.
pub trait Job {
    /// What a successful run returns.
    type Output;

    /// Runs on accelerator `A` as the plan says.
    fn run<A: Accelerator>(self, plan: &Plan) -> anyhow::Result<Self::Output>;
}
