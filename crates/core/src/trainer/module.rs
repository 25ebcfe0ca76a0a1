//! What a user writes: the model's steps and its optimizer, generic over the burn backend.
//!
//! Training runs on the autodiff backend `B`; validation, test and prediction run on the
//! model's inner (non-autodiff) module, as burn's `AutodiffModule::valid` gives it, so they
//! build no graph. A model written generically over `B: Backend` implements the evaluation
//! traits once and they serve both.

use burn::module::{AutodiffModule, Module};
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};

use crate::trainer::log::StepLog;

/// When the learning-rate scheduler steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchedulerInterval {
    /// Once per optimizer step (burn's convention).
    #[default]
    Step,
    /// Once per epoch.
    Epoch,
}

/// What `configure_optimizers` returns: the optimizer and its learning-rate scheduler.
///
/// A plain `f64` is a constant learning rate (burn implements `LrScheduler` for it).
pub struct Optimizers<O, S> {
    /// The optimizer, e.g. `AdamConfig::new().init()`.
    pub optimizer: O,
    /// The scheduler that gives each step's learning rate.
    pub scheduler: S,
    /// When the scheduler steps.
    pub interval: SchedulerInterval,
}

impl<O, S> Optimizers<O, S> {
    /// An optimizer whose scheduler steps every optimizer step.
    pub fn new(optimizer: O, scheduler: S) -> Self {
        Self {
            optimizer,
            scheduler,
            interval: SchedulerInterval::Step,
        }
    }

    /// Steps the scheduler once per epoch instead.
    pub fn per_epoch(mut self) -> Self {
        self.interval = SchedulerInterval::Epoch;
        self
    }
}

/// A model the Trainer can fit (Lightning's `training_step` and `configure_optimizers`).
pub trait TrainingModule<B: AutodiffBackend>: AutodiffModule<B> + Sized {
    /// A training batch, as the data module's batcher makes it on `B`.
    type Batch;
    /// The optimizer.
    type Optimizer: Optimizer<Self, B>;
    /// The learning-rate scheduler (`f64` for a constant rate).
    type Scheduler: LrScheduler;

    /// The loss of one batch. Metrics go through `log`.
    fn training_step(&self, batch: Self::Batch, log: &mut StepLog<B>) -> Tensor<B, 1>;

    /// The optimizer and scheduler; called once at the start of `fit`.
    fn configure_optimizers(&self) -> Optimizers<Self::Optimizer, Self::Scheduler>;
}

/// A model the Trainer can validate and test (on the inner backend).
pub trait EvalModule<B: Backend>: Module<B> {
    /// A validation or test batch.
    type Batch;

    /// Logs the metrics of one validation batch (on_epoch by default).
    fn validation_step(&self, batch: Self::Batch, log: &mut StepLog<B>);

    /// Logs the metrics of one test batch; by default the validation step (same metric names).
    fn test_step(&self, batch: Self::Batch, log: &mut StepLog<B>) {
        self.validation_step(batch, log);
    }
}

/// A model the Trainer can predict with (on the inner backend).
pub trait PredictModule<B: Backend>: Module<B> {
    /// A predict batch.
    type Batch;
    /// What one batch predicts.
    type Output;

    /// The prediction for one batch.
    fn predict_step(&self, batch: Self::Batch) -> Self::Output;
}
