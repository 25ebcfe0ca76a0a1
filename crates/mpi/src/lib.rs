//! ember-mpi: the distributed engine on OpenMPI (through the `mpi` crate).
//!
//! - [`MpiEngine::launch`] is the local launcher: `--trainer.devices=N` with no cluster
//!   environment re-executes this program under `mpirun -np N` on this machine and waits.
//! - [`MpiEngine::join`] initialises MPI in a process that `mpirun`, `srun` (with PMIx) or the
//!   local launcher started and returns its [`MpiCollective`], which also serves a
//!   [`MpiKeyValueStore`] to runtimes that bootstrap through one.
//!
//! See `docs/distributed.md`.

mod collective;
mod key_value;
mod launcher;
mod shared;

pub use collective::MpiCollective;
pub use key_value::MpiKeyValueStore;
pub use launcher::mpirun_command;

use std::rc::Rc;
use std::time::Duration;

use ember_plan::Plan;
use ember_plan::collective::{Collective, Engine};

/// OpenMPI as ember's distributed engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct MpiEngine;

impl Engine for MpiEngine {
    fn name(&self) -> &'static str {
        "mpi"
    }

    fn launch(&self, plan: &Plan, args: &[String]) -> anyhow::Result<i32> {
        launcher::launch(plan, args)
    }

    fn join(&self, plan: &Plan, timeout: Duration) -> anyhow::Result<Rc<dyn Collective>> {
        Ok(Rc::new(MpiCollective::join(plan, timeout)?))
    }

    fn stop_together(&self, plan: &Plan, code: u8) -> u8 {
        launcher::stop_together(plan, code)
    }
}
