//! One optimizer step (the strategy's reduction, the precision plugin's unscaling, check and
//! clipping, the step at the scheduler's rate, or the one a callback set, and at each module's
//! share of it), taken by the
//! training loop, or by a model's `manual_training_step` through [`ManualOptimization`].

use std::marker::PhantomData;

use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;

use crate::callbacks::TrainerState;
use crate::checkpoint_io::CheckpointIO;
use crate::options::ClipAlgorithm;
use crate::plugins::access::ModelGradients;
use crate::plugins::precision;
use crate::plugins::weights::ModelWeights;
use crate::trainer::Trainer;
use crate::trainer::freezing;
use crate::trainer::log::StepLog;

/// One optimizer, the scheduler that gives its rate, and the rate in effect.
pub(in crate::trainer) struct Slot<O, S> {
    pub(in crate::trainer) optimizer: O,
    pub(in crate::trainer) scheduler: S,
    /// Set by the scheduler when the first step (or epoch) begins.
    pub(in crate::trainer) lr: f64,
}

/// What one optimizer step changes besides the model and its optimizer: the Trainer's
/// strategy and precision plugin, the loop's counters, the checkpoint IO it checks.
pub(in crate::trainer) struct StepContext<'a, B: AutodiffBackend> {
    pub(in crate::trainer) trainer: &'a mut Trainer<B>,
    pub(in crate::trainer) state: &'a mut TrainerState,
    pub(in crate::trainer) checkpoint_io: &'a dyn CheckpointIO,
    /// The schedulers step with their optimizer (not once per epoch).
    pub(in crate::trainer) scheduler_per_step: bool,
    /// What the precision plugin reported at each step (the loss scale ...), to be logged.
    pub(in crate::trainer) metrics: Vec<(String, f64)>,
}

impl<'a, B: AutodiffBackend> StepContext<'a, B> {
    /// The context of the steps of one batch; `scheduler_per_step` unless the schedulers
    /// step once per epoch.
    pub(in crate::trainer) fn new(
        trainer: &'a mut Trainer<B>,
        (state, checkpoint_io): (&'a mut TrainerState, &'a dyn CheckpointIO),
        scheduler_per_step: bool,
    ) -> Self {
        Self {
            trainer,
            state,
            checkpoint_io,
            scheduler_per_step,
            metrics: Vec::new(),
        }
    }

    /// Logs what the precision plugin reported at the steps taken.
    pub(in crate::trainer) fn log_metrics(self, log: &mut StepLog<B>) {
        for (name, value) in self.metrics {
            log.log(&name, value);
        }
    }

    /// Optimizer `index` (`slot`) steps `model` with `grads`: reduced over the ranks by the
    /// strategy, unscaled, checked and clipped (`clip`) by the precision plugin, then the
    /// optimizer at its scheduler's rate (and modules with a share of the rate in steps of
    /// their own) unless the gradients were not finite. Counts one global step.
    pub(in crate::trainer) fn step<M, O, S>(
        &mut self,
        (index, slot): (usize, &mut Slot<O, S>),
        mut model: M,
        mut grads: GradientsParams,
        clip: Option<(ClipAlgorithm, f64)>,
    ) -> anyhow::Result<M>
    where
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
        S: LrScheduler,
    {
        let _span = self.trainer.profiler.span("optimizer step");
        let mut model_grads = ModelGradients::<B, M>::new(&model, &mut grads);
        let reduction = self.trainer.profiler.span("gradient reduction");
        self.trainer.strategy.reduce_gradients(&mut model_grads)?;
        drop(reduction);
        let strategy = &mut self.trainer.strategy;
        let finite = strategy.before_optimizer_step(&mut model_grads, clip);
        // Every rank takes the step or none does: it is skipped when any rank's gradients say so.
        let mut skip = [f64::from(u8::from(!finite))];
        strategy.agree(&mut skip)?;
        let taken = skip[0] == 0.0;
        strategy.parts_mut().precision.on_step_decided(taken);
        self.metrics
            .extend(strategy.parts().precision.step_metrics());
        if self.scheduler_per_step {
            slot.lr = slot.scheduler.step();
        }
        if let Some(set) = &self.state.lr_override {
            anyhow::ensure!(
                index == 0,
                "a callback ({}) sets the learning rate of one optimizer, but manual_training_step stepped optimizer {index}",
                set.set_by
            );
            slot.lr = set.rate;
        }
        let step = self.state.global_step;
        if taken {
            let shares = &self.state.lr_factors;
            let groups = match shares.is_empty() {
                true => Vec::new(),
                false => freezing::split_by_share::<B, M>(&model, &mut grads, shares),
            };
            model = slot.optimizer.step(slot.lr, model, grads);
            for (share, grads) in groups {
                model = slot.optimizer.step(slot.lr * share, model, grads);
            }
            let mut weights = ModelWeights::<B, M>::new(&mut model);
            self.trainer
                .strategy
                .on_optimizer_step(&mut weights, step + 1)?;
        } else {
            tracing::info!(
                target: "ember",
                step,
                optimizer = index,
                local = !finite,
                "non-finite gradients: optimizer step skipped on every rank"
            );
        }
        self.metrics.extend(self.trainer.strategy.step_metrics());
        self.state.global_step = step + 1;
        if index == 0 {
            self.state.learning_rate = slot.lr;
        }
        self.checkpoint_io.check()?;
        Ok(model)
    }
}

/// What `manual_training_step` steps the optimizers with (Lightning's `self.optimizers()`,
/// `manual_backward`, `clip_gradients` and `optimizer.step()` in one place).
///
/// Every [`step`](Self::step) is a whole optimizer step as automatic optimization takes it:
/// the gradients are averaged over the ranks under `ddp` (so every rank must step the same
/// optimizers in the same order), unscaled and checked by the precision plugin (a step whose
/// gradients are not finite is skipped and, under `16-mixed`, the loss scale halved), and
/// the optimizer steps at its scheduler's current rate; each counts one global step, as
/// Lightning counts them. Schedulers step as `Optimizers::interval` says (per step of their
/// optimizer, or per epoch). Accumulating gradients over batches is the step's to do
/// (burn's `GradientsAccumulator`).
///
/// Its type parameters are the model's: models name it `ember::Manual<'_, B, Self>`.
pub struct ManualOptimization<'a, B: AutodiffBackend, M, O, S> {
    pub(in crate::trainer) cx: StepContext<'a, B>,
    pub(in crate::trainer) slots: &'a mut [Slot<O, S>],
    pub(in crate::trainer) model: PhantomData<M>,
}

impl<B, M, O, S> ManualOptimization<'_, B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    /// How many optimizers `configure_optimizers` returned.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none (never: `configure_optimizers` returns at least one).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The model a forward pass should run on: under a mixed precision its copy in the
    /// compute types (gradients still reach the model's own parameters), otherwise the model.
    pub fn compute(&self, model: &M) -> M {
        precision::compute_copy(self.cx.trainer.precision(), model).unwrap_or_else(|| model.clone())
    }

    /// The backward pass of `loss`, scaled as the precision plugin says (Lightning's
    /// `manual_backward`): burn's gradients of every parameter it depends on. Take a part's
    /// with `GradientsParams::from_module(&mut grads, &model.part)`, or all of them with
    /// `GradientsParams::from_grads(grads, &model)`.
    pub fn backward(&self, loss: Tensor<B, 1>) -> B::Gradients {
        precision::scale_loss(self.cx.trainer.precision(), loss).backward()
    }

    /// Steps optimizer `index` with `grads` (see the type's docs); returns the updated model.
    pub fn step(&mut self, index: usize, model: M, grads: GradientsParams) -> anyhow::Result<M> {
        self.step_with(index, model, grads, None)
    }

    /// As [`step`](Self::step), clipping the (unscaled) gradients first: by their global norm
    /// or by value (Lightning's `clip_gradients` before `optimizer.step()`).
    pub fn step_clipped(
        &mut self,
        index: usize,
        model: M,
        grads: GradientsParams,
        (algorithm, threshold): (ClipAlgorithm, f64),
    ) -> anyhow::Result<M> {
        self.step_with(index, model, grads, Some((algorithm, threshold)))
    }

    /// Optimizer `index`'s current learning rate (NaN before its first step).
    pub fn lr(&self, index: usize) -> f64 {
        self.slots.get(index).map_or(f64::NAN, |slot| slot.lr)
    }

    fn step_with(
        &mut self,
        index: usize,
        model: M,
        grads: GradientsParams,
        clip: Option<(ClipAlgorithm, f64)>,
    ) -> anyhow::Result<M> {
        let count = self.slots.len();
        let slot = self.slots.get_mut(index).ok_or_else(|| {
            anyhow::anyhow!(
                "manual_training_step stepped optimizer {index}, but configure_optimizers returned {count}"
            )
        })?;
        self.cx.step((index, slot), model, grads, clip)
    }
}
