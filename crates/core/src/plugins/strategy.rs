//! Strategies: how a run spreads over processes, and what the loop asks of it.
//!
//! A strategy owns the parts of a run that differ between one device and many — the
//! collective between the processes, the precision plugin, the checkpoint IO and the plan
//! (cluster environment, ranks, devices) — and the loop calls it wherever strategies differ:
//! the seed and the starting weights, how each loader is sharded, the gradient reduction
//! before the optimizer step, what happens after the step, which rank writes, the stop
//! agreement, and teardown. The built-ins are `single_device` ([`SingleDevice`]) `ddp`
//! ([`Ddp`](crate::plugins::ddp::Ddp)) and `ddp_sharded`
//! ([`DdpSharded`](crate::plugins::ddp_sharded::DdpSharded)); see `docs/plugins.md` for writing one.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

use burn::module::ParamId;

use crate::checkpoint_io::CheckpointIO;
use crate::collective::{Collective, ReduceOp};
use crate::options::ClipAlgorithm;
use crate::plan::Plan;
use crate::plugins::access::Gradients;
use crate::plugins::device_reduce::DeviceCollective;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::shard::Shard;
use crate::plugins::weights::Weights;

/// What the Trainer connects to every strategy it builds.
pub struct StrategyParts {
    /// The resolved plan of this process: accelerator, devices, cluster environment, ranks.
    pub plan: Plan,
    /// The collective between the run's processes ([`SingleProcess`](crate::collective::SingleProcess)
    /// in a one-process run).
    pub collective: Rc<dyn Collective>,
    /// The numeric policy.
    pub precision: Box<dyn PrecisionPlugin>,
    /// How checkpoints are written and read.
    pub checkpoint_io: Arc<dyn CheckpointIO>,
    /// `--trainer.ddp_bucket_cap_mb` in bytes: how much gradient one all-reduce carries.
    pub bucket_cap_bytes: usize,
    /// `--trainer.sync_batchnorm`: average batch-norm running statistics over the ranks.
    pub sync_batchnorm: bool,
    /// The collective that sums gradients on the device (NCCL between CUDA ranks), when the
    /// plan's process group backend is the accelerator's own; `None`: gradients go through
    /// [`collective`](Self::collective) in host buffers.
    pub device_collective: Option<Box<dyn DeviceCollective>>,
}

/// How a run spreads over processes: the Trainer's loops call it wherever that matters.
///
/// Only [`name`](Self::name), [`parts`](Self::parts) and [`parts_mut`](Self::parts_mut) are
/// required; every other method has the one-process behaviour (or, for the collective calls,
/// the behaviour every data-parallel strategy shares), so a strategy overrides what it
/// changes. A custom strategy usually wraps a built-in one and delegates the rest.
pub trait Strategy {
    /// The name it is selected by (`--trainer.strategy`).
    fn name(&self) -> &str;

    /// The parts the Trainer connected.
    fn parts(&self) -> &StrategyParts;

    /// The parts the Trainer connected, to change.
    fn parts_mut(&mut self) -> &mut StrategyParts;

    /// The collective between the run's processes, for the loop and for user code.
    fn collective(&self) -> &dyn Collective {
        self.parts().collective.as_ref()
    }

    /// Whether this process speaks for the run: it logs, shows progress and writes checkpoints.
    fn is_global_zero(&self) -> bool {
        self.collective().rank() == 0
    }

    /// The share of every loader (train, val, test, predict) this process sees.
    fn shard(&self) -> Shard {
        Shard {
            rank: self.collective().rank(),
            world: self.collective().world_size(),
        }
    }

    /// How many devices this process drives, each taking a loader's `batch_size` items per
    /// step (Lightning's per-device batch size): as the plan says — 1, except under a strategy
    /// that drives all of a node's devices from one process (`xla`), whose batches hold
    /// `batch_size` × devices.
    fn devices_per_process(&self) -> usize {
        self.parts().plan.devices_per_process()
    }

    /// The seed every process uses, given this one's (rank 0's wins).
    fn broadcast_seed(&self, seed: u64) -> anyhow::Result<u64> {
        if self.collective().world_size() < 2 {
            return Ok(seed);
        }
        let mut bytes = seed.to_le_bytes().to_vec();
        self.collective().broadcast(&mut bytes, 0)?;
        let bytes: [u8; 8] = bytes
            .try_into()
            .map_err(|_| anyhow::anyhow!("rank 0 broadcast a seed that is not 8 bytes"))?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Prepares the weights before the first step of `fit` (after a resume): e.g. every rank
    /// takes rank 0's.
    fn setup_weights(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        let _ = weights;
        Ok(())
    }

    /// Reduces the step's gradients across processes (after accumulation, before the precision
    /// plugin unscales and clips them).
    fn reduce_gradients(&mut self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        let _ = grads;
        Ok(())
    }

    /// The gradients as the precision plugin sees them (unscaling, the finiteness check,
    /// clipping), after [`reduce_gradients`](Self::reduce_gradients): `grads` themselves,
    /// unless the ranks hold different gradients and norms must cover them all.
    fn precision_view<'g>(&self, grads: &'g mut dyn Gradients) -> Box<dyn Gradients + 'g> {
        Box::new(grads)
    }

    /// Hands the (reduced) gradients to the precision plugin through
    /// [`precision_view`](Self::precision_view) to be unscaled, checked and clipped
    /// ([`PrecisionPlugin::before_optimizer_step`]); returns whether the optimizer should step.
    fn before_optimizer_step(
        &mut self,
        grads: &mut dyn Gradients,
        clip: Option<(ClipAlgorithm, f64)>,
    ) -> bool {
        let mut view = self.precision_view(grads);
        let precision = &mut self.parts_mut().precision;
        precision.before_optimizer_step(&mut *view, clip)
    }

    /// Called after each optimizer step that was taken, with the step count so far.
    fn on_optimizer_step(
        &mut self,
        weights: &mut dyn Weights,
        global_step: u64,
    ) -> anyhow::Result<()> {
        let _ = (weights, global_step);
        Ok(())
    }

    /// Values to log with each optimizer step, read after [`on_optimizer_step`](Self::on_optimizer_step)
    /// (or after a skipped step); they take the path of the model's own step values (every
    /// logger, with the epoch, at `log_every_n_steps`; rank 0's value).
    fn step_metrics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// How the ranks share the optimizer's state, for a strategy whose ranks each keep part
    /// of it (`ddp_sharded`); `None` (the default): every rank keeps all of it.
    fn optimizer_sharding(&mut self) -> Option<&mut dyn OptimizerSharding> {
        None
    }

    /// Combines per-process decisions so every process acts the same: each value becomes the
    /// maximum over the processes (a stop anywhere stops all at the same batch).
    fn agree(&self, flags: &mut [f64]) -> anyhow::Result<()> {
        if self.collective().world_size() < 2 {
            return Ok(());
        }
        self.collective().all_reduce_f64(flags, ReduceOp::Max)
    }

    /// Called once at the end of `fit` with the final weights (which it may still change).
    fn teardown(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        let _ = weights;
        Ok(())
    }
}

/// What a strategy whose ranks each keep part of the optimizer's state tells the Trainer
/// ([`Strategy::optimizer_sharding`]).
pub trait OptimizerSharding {
    /// The parameters whose optimizer state this process keeps; `None`: all of them (one
    /// process). With a part, checkpoints gather every rank's state on rank 0, and the state a
    /// resumed fit restores is cut to this part. Called with the model of each `fit` before its
    /// first step.
    fn owned(&mut self, weights: &dyn Weights) -> Option<HashSet<ParamId>>;

    /// Checks, at the end of `fit`, the optimizer state this process holds: each parameter it
    /// holds state for, with the bytes of that state.
    fn check(&self, held: &[(ParamId, u64)]) -> anyhow::Result<()>;
}

/// One process on one device: every hook is the identity.
pub struct SingleDevice {
    parts: StrategyParts,
}

impl SingleDevice {
    /// The `single_device` strategy over `parts`.
    pub fn new(parts: StrategyParts) -> Self {
        Self { parts }
    }
}

impl Strategy for SingleDevice {
    fn name(&self) -> &str {
        ember_plan::strategy::SINGLE_DEVICE
    }

    fn parts(&self) -> &StrategyParts {
        &self.parts
    }

    fn parts_mut(&mut self) -> &mut StrategyParts {
        &mut self.parts
    }
}

/// Builds a strategy over the parts the Trainer connects; registered under a name, or given
/// to [`TrainerBuilder::strategy`](crate::trainer::TrainerBuilder::strategy).
pub type StrategyFactory = Arc<dyn Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>>>;
