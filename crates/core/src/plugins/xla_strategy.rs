//! The `xla` strategy (Lightning's XLAStrategy, the way TPU hosts train): one process drives
//! every device of its node as one accelerator device, on which XLA's SPMD partitioner splits
//! each program over the devices and each batch by rows, and joins the devices' parts (the
//! loss, the gradients, `sync_dist` values) with all-reduces inside the program. Nothing is
//! reduced between processes; each step's batch holds `batch_size` items per device.

use crate::plan::Plan;
use crate::plugins::strategy::{Strategy, StrategyParts};

/// One process driving all of its node's devices as one.
pub struct XlaStrategy {
    parts: StrategyParts,
}

impl XlaStrategy {
    /// The `xla` strategy over `parts`.
    pub fn new(parts: StrategyParts) -> Self {
        Self { parts }
    }

    /// Refuses a plan it cannot run: another accelerator than `xla`, or several hosts.
    pub fn check_plan(plan: &Plan) -> Result<(), String> {
        if plan.accelerator != "xla" {
            return Err(format!(
                "it partitions XLA programs over devices; use --trainer.accelerator=xla (not {})",
                plan.accelerator
            ));
        }
        if plan.num_nodes > 1 {
            return Err(
                "it drives the devices of one host; over several hosts only its bootstrap is built, not the programs (docs/xla.md, Limits; use --trainer.strategy=ddp)"
                    .into(),
            );
        }
        Ok(())
    }
}

impl Strategy for XlaStrategy {
    fn name(&self) -> &str {
        ember_plan::strategy::XLA
    }

    fn parts(&self) -> &StrategyParts {
        &self.parts
    }

    fn parts_mut(&mut self) -> &mut StrategyParts {
        &mut self.parts
    }
}
