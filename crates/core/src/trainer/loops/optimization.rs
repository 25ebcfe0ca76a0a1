//! What trains the model: its optimizers with their schedulers and rates (one optimizer step
//! is in [`super::step`]), where a checkpoint keeps each, and what manual optimization refuses.

use burn::optim::GradientsAccumulator;
use burn::tensor::backend::AutodiffBackend;

use super::step::Slot;
use crate::trainer::Trainer;
use crate::trainer::module::{Optimizers, SchedulerInterval, TrainingModule};

/// Where a checkpoint keeps optimizer `index`'s parts: optimizer 0 in the sections a
/// one-optimizer fit has always used, the others in sections suffixed `.{index}` with state
/// tensors named `opt{index}/...`.
pub(in crate::trainer) struct SlotSections {
    /// ember's description of the optimizer's state.
    pub(in crate::trainer) state: String,
    /// burn's record of an optimizer whose state ember does not read.
    pub(in crate::trainer) record: String,
    /// The scheduler's record.
    pub(in crate::trainer) scheduler: String,
    /// What the optimizer's state tensors' names start with.
    pub(in crate::trainer) prefix: String,
}

impl SlotSections {
    /// The section of every optimizer's rate, when there are several (a JSON list).
    pub(in crate::trainer) const RATES: &'static str = "learning_rates";

    pub(in crate::trainer) fn of(index: usize) -> Self {
        match index {
            0 => Self {
                state: "optimizer_state".into(),
                record: "optimizer".into(),
                scheduler: "scheduler".into(),
                prefix: String::new(),
            },
            i => Self {
                state: format!("optimizer_state.{i}"),
                record: format!("optimizer.{i}"),
                scheduler: format!("scheduler.{i}"),
                prefix: format!("opt{i}/"),
            },
        }
    }
}

/// The model and what trains it.
pub(in crate::trainer) struct Optimization<B: AutodiffBackend, M: TrainingModule<B>> {
    pub(in crate::trainer) model: M,
    /// The optimizers in `configure_optimizers`' order (index 0 is the one automatic
    /// optimization steps).
    pub(in crate::trainer) slots: Vec<Slot<M::Optimizer, M::Scheduler>>,
    pub(in crate::trainer) interval: SchedulerInterval,
    /// The model steps its optimizers itself (`manual_training_step`).
    pub(in crate::trainer) manual: bool,
    /// Gradients summed over the batches of one optimizer step.
    pub(in crate::trainer) accumulator: GradientsAccumulator<M>,
}

impl<B: AutodiffBackend, M: TrainingModule<B>> Optimization<B, M> {
    /// `model` with what `configure_optimizers` returned; several optimizers need manual
    /// optimization (as in Lightning 2).
    pub(in crate::trainer) fn new(
        model: M,
        optimizers: Optimizers<M::Optimizer, M::Scheduler>,
    ) -> anyhow::Result<Self> {
        let Optimizers {
            optimizer,
            scheduler,
            interval,
            more,
            manual,
            from_config: _,
        } = optimizers;
        anyhow::ensure!(
            manual || more.is_empty(),
            "configure_optimizers returned {} optimizers: several optimizers need manual optimization (Optimizers::manual and TrainingModule::manual_training_step), as in Lightning",
            more.len() + 1
        );
        let slot = |(optimizer, scheduler)| Slot {
            optimizer,
            scheduler,
            lr: f64::NAN,
        };
        let slots = std::iter::once((optimizer, scheduler))
            .chain(more)
            .map(slot)
            .collect();
        Ok(Self {
            model,
            slots,
            interval,
            manual,
            accumulator: GradientsAccumulator::new(),
        })
    }

    /// Whether the schedulers step with their optimizer (not once per epoch).
    pub(in crate::trainer) fn steps_schedulers(&self) -> bool {
        self.interval == SchedulerInterval::Step
    }
}

/// Refuses what manual optimization cannot honour, as Lightning does: accumulation and
/// clipping by flag (the step does them), the learning-rate finder (it reads the loss the
/// training step returns and sets one optimizer's rate), and a strategy that shards one
/// optimizer's state.
pub(in crate::trainer) fn check_manual<B: AutodiffBackend>(
    trainer: &mut Trainer<B>,
) -> anyhow::Result<()> {
    let options = &trainer.options;
    if let Some(settings) = &options.lr_find {
        return Err(crate::trainer::lr_find::refused_under_manual(settings).into());
    }
    if options.accumulate_grad_batches != 1 {
        return Err(crate::error::FlagError::new(
            "--trainer.accumulate_grad_batches",
            options.accumulate_grad_batches.to_string(),
            "1 under manual optimization: manual_training_step accumulates gradients itself (burn's GradientsAccumulator)",
        )
        .into());
    }
    if let Some(threshold) = options.gradient_clip_val {
        return Err(crate::error::FlagError::new(
            "--trainer.gradient_clip_val",
            threshold.to_string(),
            "null under manual optimization: clip in manual_training_step with ManualOptimization::step_clipped",
        )
        .into());
    }
    let strategy = trainer.strategy.name().to_owned();
    if trainer.strategy.optimizer_sharding().is_some() {
        return Err(crate::error::FlagError::new(
            "--trainer.strategy",
            strategy.as_str(),
            format!(
                "ddp or single_device under manual optimization: {strategy} shards one optimizer's state"
            ),
        )
        .into());
    }
    Ok(())
}
