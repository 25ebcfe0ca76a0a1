//! Logging from inside a step: `log.log("train_loss", &loss)`, reduced per step and per epoch.
//!
//! A step only records what it logs; the loops' [`MetricCollector`](super::collector) decides
//! when a value is read from the device and reduces it.

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};

use crate::stage::Stage;

/// How epoch values of a metric are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduce {
    /// Mean weighted by batch size.
    #[default]
    Mean,
    /// Sum.
    Sum,
    /// Largest value.
    Max,
    /// Smallest value.
    Min,
}

/// Options of one logged value; the defaults depend on the stage, as in Lightning.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LogOptions {
    /// Record the value of each step (default: true in training, false otherwise).
    pub on_step: Option<bool>,
    /// Record the epoch's reduction (default: false in training, true otherwise).
    pub on_epoch: Option<bool>,
    /// Show it in the progress bar.
    pub prog_bar: bool,
    /// Weight in the epoch mean (default: 1 per step).
    pub batch_size: Option<usize>,
    /// Epoch reduction.
    pub reduce: Reduce,
    /// Reduce the value across the ranks of a distributed run: the epoch value over every
    /// rank's shard, a step value as the mean of the ranks' (otherwise each rank keeps its own,
    /// and rank 0's is the one logged).
    pub sync_dist: bool,
    /// With several validation (or test) loaders, name the value `NAME/dataloader_idx_N` after
    /// the loader it came from (default: true, as Lightning). `false` keeps the name as given,
    /// so every loader's batches reduce into one value.
    pub add_dataloader_idx: Option<bool>,
}

impl LogOptions {
    /// Record every step's value.
    pub fn on_step(mut self, yes: bool) -> Self {
        self.on_step = Some(yes);
        self
    }
    /// Record the epoch's reduction.
    pub fn on_epoch(mut self, yes: bool) -> Self {
        self.on_epoch = Some(yes);
        self
    }
    /// Show the value in the progress bar.
    pub fn prog_bar(mut self) -> Self {
        self.prog_bar = true;
        self
    }
    /// Weight of this step in the epoch mean.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = Some(n);
        self
    }
    /// Epoch reduction.
    pub fn reduce(mut self, reduce: Reduce) -> Self {
        self.reduce = reduce;
        self
    }
    /// Reduce the value across ranks.
    pub fn sync_dist(mut self) -> Self {
        self.sync_dist = true;
        self
    }
    /// Whether the name gets the loader's `/dataloader_idx_N` when there are several.
    pub fn add_dataloader_idx(mut self, yes: bool) -> Self {
        self.add_dataloader_idx = Some(yes);
        self
    }
}

/// A value as a step logged it: still on the device, or a host number.
pub enum LogValue<B: Backend> {
    /// A one-element tensor, read only when needed.
    Tensor(Tensor<B, 1>),
    /// A host number.
    Scalar(f64),
}

impl<B: Backend> LogValue<B> {
    pub(super) fn read(self) -> f64 {
        match self {
            LogValue::Tensor(t) => t.into_scalar().elem::<f64>(),
            LogValue::Scalar(x) => x,
        }
    }
}

/// A logged tensor is detached, so holding it until it is read keeps no autodiff graph alive.
impl<B: Backend> From<&Tensor<B, 1>> for LogValue<B> {
    fn from(t: &Tensor<B, 1>) -> Self {
        LogValue::Tensor(t.clone().detach())
    }
}

impl<B: Backend> From<Tensor<B, 1>> for LogValue<B> {
    fn from(t: Tensor<B, 1>) -> Self {
        LogValue::Tensor(t.detach())
    }
}

impl<B: Backend> From<f64> for LogValue<B> {
    fn from(x: f64) -> Self {
        LogValue::Scalar(x)
    }
}

impl<B: Backend> From<f32> for LogValue<B> {
    fn from(x: f32) -> Self {
        LogValue::Scalar(f64::from(x))
    }
}

/// One value a step logged, as it logged it.
pub(super) struct Entry<B: Backend> {
    pub(super) name: String,
    pub(super) value: LogValue<B>,
    pub(super) options: LogOptions,
}

/// What a step logs; handed to every `*_step` method.
pub struct StepLog<B: Backend> {
    stage: Stage,
    pub(super) entries: Vec<Entry<B>>,
    missing: Option<&'static str>,
    /// The loader the batch came from, when the loop has several.
    pub(super) loader: Option<usize>,
}

impl<B: Backend> StepLog<B> {
    pub(crate) fn new(stage: Stage) -> Self {
        Self {
            stage,
            entries: Vec::new(),
            missing: None,
            loader: None,
        }
    }

    /// Batches from here on come from loader `index` of `count`.
    pub(crate) fn set_loader(&mut self, index: usize, count: usize) {
        self.loader = (count > 1).then_some(index);
    }

    /// The index of the loader this batch came from (Lightning's `dataloader_idx`): 0 when the
    /// loop has one loader.
    pub fn dataloader_idx(&self) -> usize {
        self.loader.unwrap_or(0)
    }

    /// Records that the step called is one the model does not implement (the trait's default).
    pub(crate) fn missing_step(&mut self, step: &'static str) {
        self.missing = Some(step);
    }

    /// The step found missing since the last call, if any.
    pub(crate) fn take_missing(&mut self) -> Option<&'static str> {
        self.missing.take()
    }

    /// The loop this step belongs to (validate steps during fit report `Validate`).
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Logs a value with the stage's default options, and returns it, so a `training_step`
    /// can end with `log.log("train_loss", loss)`.
    pub fn log<V: Into<LogValue<B>> + Clone>(&mut self, name: &str, value: V) -> V {
        self.log_with(name, value, LogOptions::default())
    }

    /// Logs a value with explicit options, and returns it.
    pub fn log_with<V: Into<LogValue<B>> + Clone>(
        &mut self,
        name: &str,
        value: V,
        options: LogOptions,
    ) -> V {
        self.entries.push(Entry {
            name: name.to_owned(),
            value: value.clone().into(),
            options,
        });
        value
    }

    /// Whether a value is recorded per step and per epoch unless its options say.
    pub(super) fn defaults(&self) -> (bool, bool) {
        match self.stage {
            Stage::Fit => (true, false),
            _ => (false, true),
        }
    }
}
