//! What a user writes: the model's steps and its optimizer, generic over the burn backend.
//!
//! [`LightningModule`] holds the steps, written once for every backend: training runs them
//! on the autodiff backend `B`, validation, test and prediction on the model's inner
//! (non-autodiff) module, as burn's `AutodiffModule::valid` gives it, so they build no graph.
//! Only `training_step` is required. [`TrainingModule`] adds the optimizer, on the autodiff
//! backend only.

use std::fmt;

use burn::data::dataloader::batcher::Batcher;
use burn::module::{AutodiffModule, Module};
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use serde::Serialize;
use serde_json::Value;

use crate::optim::{
    self, AnyOptimizer, AnyScheduler, ExactState, OptimizerSections, OptimizerSpec,
};
use crate::trainer::hparams::Hparams;
use crate::trainer::log::StepLog;
use crate::trainer::loops::step::ManualOptimization;

pub use crate::optim::SchedulerInterval;

/// What `configure_optimizers` returns: the optimizer and its learning-rate scheduler, more of
/// them for manual optimization, and whether the Trainer or the model steps them.
///
/// A plain `f64` is a constant learning rate (burn implements `LrScheduler` for it), and the
/// default: `Optimizers<Self::Optimizer>`.
pub struct Optimizers<O, S = f64> {
    /// The optimizer, e.g. `AdamConfig::new().init()` (index 0).
    pub optimizer: O,
    /// The scheduler that gives each step's learning rate.
    pub scheduler: S,
    /// When the schedulers step.
    pub interval: SchedulerInterval,
    /// More optimizers with their schedulers (indices 1, 2, ...), each usually over a part of
    /// the model (a GAN's generator and discriminator); only with manual optimization, as in
    /// Lightning 2.
    pub more: Vec<(O, S)>,
    /// Lightning's `automatic_optimization = False`: the Trainer calls
    /// [`TrainingModule::manual_training_step`], which steps the optimizers itself.
    pub manual: bool,
    /// Whether they were made from the run's `optimizer` and `lr_scheduler` config sections
    /// ([`from_hparams`](Optimizers::from_hparams)). `fit` refuses those sections when the
    /// model's `configure_optimizers` does not read them.
    pub from_config: bool,
}

/// One optimizer with burn's default config at a constant learning rate, for
/// `configure_optimizers`: `Ok(Optimizers::adam(lr))`.
macro_rules! default_optimizer {
    ($name:ident, $ty:ident, $config:ident, $what:literal) => {
        impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizers<optim::$ty<M, B>> {
            #[doc = concat!($what, " with burn's default config (`", stringify!($config), "::new()`) at the constant learning rate `lr`.")]
            pub fn $name(lr: f64) -> Self {
                Self::new(optim::$config::new().init(), lr)
            }
        }
    };
}

default_optimizer!(adam, Adam, AdamConfig, "Adam");
default_optimizer!(adamw, AdamW, AdamWConfig, "AdamW");
default_optimizer!(sgd, Sgd, SgdConfig, "SGD (no momentum)");

impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizers<AnyOptimizer<M, B>, AnyScheduler> {
    /// The optimizer and scheduler the run's config names in its `optimizer` and
    /// `lr_scheduler` sections (LightningCLI's `--optimizer`, `--lr_scheduler`); `default`
    /// where it names no optimizer, and a constant rate where it names no scheduler. A
    /// configured scheduler starts from the optimizer's `lr` and steps per epoch unless its
    /// `interval` says `step`.
    pub fn from_hparams(hparams: &Hparams, default: OptimizerSpec) -> anyhow::Result<Self> {
        let sections = OptimizerSections::from_config(hparams.value())?;
        let spec = sections.optimizer.clone().unwrap_or(default);
        spec.check()?;
        let (scheduler, interval) = sections.scheduler_for(spec.lr())?;
        let mut optimizers = Self::new(spec.init(), scheduler);
        optimizers.interval = interval;
        optimizers.from_config = true;
        Ok(optimizers)
    }
}

impl<O, S> Optimizers<O, S> {
    /// An optimizer whose scheduler steps every optimizer step.
    pub fn new(optimizer: O, scheduler: S) -> Self {
        Self {
            optimizer,
            scheduler,
            interval: SchedulerInterval::Step,
            more: Vec::new(),
            manual: false,
            from_config: false,
        }
    }

    /// Steps the schedulers once per epoch instead.
    pub fn per_epoch(mut self) -> Self {
        self.interval = SchedulerInterval::Epoch;
        self
    }

    /// Another optimizer with its scheduler: the next index.
    pub fn and(mut self, optimizer: O, scheduler: S) -> Self {
        self.more.push((optimizer, scheduler));
        self
    }

    /// Manual optimization: `manual_training_step` runs each batch and steps the optimizers.
    pub fn manual(mut self) -> Self {
        self.manual = true;
        self
    }
}

/// The steps of a model (Lightning's `LightningModule`), written once for every backend.
///
/// Only `training_step` is required. A model without `validation_step` still trains (a val
/// loader is then skipped with a warning, as Lightning does); `validate`, `test` or `predict`
/// of a model that lacks the step fail with an error naming it.
pub trait LightningModule<B: Backend>: Module<B> {
    /// A batch, as the data module's batcher makes it on `B`.
    type Batch;

    /// The loss of one training batch. Metrics go through `log`. Required unless the model
    /// steps its optimizers itself ([`TrainingModule::manual_training_step`]).
    fn training_step(&self, batch: Self::Batch, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let _ = batch;
        log.missing_step("training_step");
        let device = self.devices().into_iter().next().unwrap_or_default();
        Tensor::zeros([1], &device)
    }

    /// Logs the metrics of one validation batch (on_epoch by default).
    fn validation_step(&self, batch: Self::Batch, log: &mut StepLog<B>) {
        let _ = batch;
        log.missing_step("validation_step");
    }

    /// Logs the metrics of one test batch; by default the validation step (same metric names).
    fn test_step(&self, batch: Self::Batch, log: &mut StepLog<B>) {
        self.validation_step(batch, log);
        // A model with neither step lacks test_step, the one `test` asked for.
        if log.take_missing().is_some() {
            log.missing_step("test_step");
        }
    }

    /// The prediction for one batch: anything serializable, e.g. `Prediction::of(&classes)`.
    fn predict_step(&self, batch: Self::Batch) -> Prediction {
        let _ = batch;
        Prediction(Err(PredictionError::Missing))
    }
}

/// A model the Trainer can fit: its steps, and the optimizer that trains it.
///
/// Its inner module (what `valid()` returns, on the inner backend) has the same steps; a model
/// written generically over `B: Backend` gets that for free.
pub trait TrainingModule<B: AutodiffBackend>:
    LightningModule<B> + AutodiffModule<B, InnerModule: LightningModule<B::InnerBackend>> + Sized
{
    /// The optimizer, e.g. `ember::optim::Adam<Self, B>`. Checkpoints store the state of
    /// burn's Adam, AdamW and SGD tensor by tensor, in each tensor's own dtype
    /// ([`ExactState`]), so a fit under any precision resumes exactly.
    type Optimizer: ExactState<Self, B>;
    /// The learning-rate scheduler (`f64` for a constant rate).
    type Scheduler: LrScheduler;

    /// The optimizer and scheduler; called once at the start of `fit`. `hparams` are the run's
    /// hyperparameters (the CLI's merged config, or what `Trainer::with_hparams` was given).
    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B>;

    /// One training batch under manual optimization ([`Optimizers::manual`], Lightning's
    /// `automatic_optimization = False`): compute losses on `opt.compute(&model)`, take their
    /// gradients with `opt.backward`, and step optimizer `i` with `opt.step(i, model, grads)`;
    /// returns the model the steps made.
    fn manual_training_step(
        self,
        batch: Self::Batch,
        opt: &mut Manual<'_, B, Self>,
        log: &mut StepLog<B>,
    ) -> anyhow::Result<Self> {
        let _ = (batch, opt, log);
        Err(MissingStep("manual_training_step").into())
    }

    /// End of a training epoch, after the callbacks' `on_train_epoch_end` (Lightning's
    /// `LightningModule.on_train_epoch_end`), on every rank: for what the model itself writes
    /// (samples, pictures) into `end.log_dir`.
    fn on_train_epoch_end(&self, end: &EpochEnd<'_>) -> anyhow::Result<()> {
        let _ = end;
        Ok(())
    }
}

/// What [`TrainingModule::configure_optimizers`] returns for model `M` on backend `B`:
/// `fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B>`.
pub type ConfiguredOptimizers<M, B> = anyhow::Result<
    Optimizers<<M as TrainingModule<B>>::Optimizer, <M as TrainingModule<B>>::Scheduler>,
>;

/// What `manual_training_step` steps model `M`'s optimizers with.
pub type Manual<'a, B, M> = ManualOptimization<
    'a,
    B,
    M,
    <M as TrainingModule<B>>::Optimizer,
    <M as TrainingModule<B>>::Scheduler,
>;

/// Where a training epoch ended, for [`TrainingModule::on_train_epoch_end`].
#[derive(Debug, Clone, Copy)]
pub struct EpochEnd<'a> {
    /// The epoch that ended (0-based).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// This run's log directory, when it has one.
    pub log_dir: Option<&'a std::path::Path>,
    /// Whether this process is global rank 0 (the one that writes).
    pub is_global_zero: bool,
}

/// The batch type of `M`'s inner module: what validation, test and predict batches are.
pub type EvalBatch<B, M> = <<M as AutodiffModule<B>>::InnerModule as LightningModule<
    <B as AutodiffBackend>::InnerBackend,
>>::Batch;

/// A batcher that makes model `M`'s batches from items `I`, on the autodiff backend for
/// training and on the inner backend for evaluation. A batcher generic over the backend is one.
pub trait BatcherFor<B: AutodiffBackend, I, M: TrainingModule<B>>:
    Batcher<B, I, M::Batch> + Batcher<B::InnerBackend, I, EvalBatch<B, M>>
{
}

impl<B, I, M, T> BatcherFor<B, I, M> for T
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
    T: Batcher<B, I, M::Batch> + Batcher<B::InnerBackend, I, EvalBatch<B, M>>,
{
}

/// What one predict batch returned, as JSON: predictions cross between ranks and reach the
/// command line's output that way. [`Trainer::predict`](crate::Trainer::predict) turns them
/// back into the caller's type.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction(Result<Value, PredictionError>);

#[derive(Debug, Clone, PartialEq)]
enum PredictionError {
    Missing,
    NotJson(String),
}

impl Prediction {
    /// The prediction `value` (any `Serialize` type: numbers, vectors, structs ...).
    pub fn of(value: impl Serialize) -> Self {
        Self(serde_json::to_value(value).map_err(|e| PredictionError::NotJson(e.to_string())))
    }

    /// The JSON value, or why there is none.
    pub(crate) fn into_value(self) -> anyhow::Result<Value> {
        match self.0 {
            Ok(value) => Ok(value),
            Err(PredictionError::Missing) => Err(MissingStep("predict_step").into()),
            Err(PredictionError::NotJson(e)) => {
                anyhow::bail!("predict_step returned a value that is not serializable: {e}")
            }
        }
    }
}

/// The model lacks a step the run needs; returned by the loops, so the Trainer can skip a val
/// loader during fit and name the step anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingStep(pub &'static str);

impl fmt::Display for MissingStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            "manual_training_step" => write!(
                f,
                "the model's configure_optimizers asks for manual optimization but it has no manual_training_step: implement TrainingModule::manual_training_step for it"
            ),
            "training_step" => write!(
                f,
                "the model has no training_step: implement LightningModule::training_step for it (or TrainingModule::manual_training_step with Optimizers::manual)"
            ),
            step => write!(
                f,
                "the model has no {step}: implement LightningModule::{step} for it"
            ),
        }
    }
}

impl std::error::Error for MissingStep {}
