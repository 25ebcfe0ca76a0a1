//! Callbacks: code that runs at the Trainer's hook points (Lightning's `Callback`).
//!
//! A callback sees the loop's state through a [`CallbackContext`]: counters, the latest
//! metrics, the loggers, the device's stats, and (during `fit`) a way to save a checkpoint.
//! It can ask the loop to stop by setting `state.should_stop`. The built-in ones, and those an
//! application registers by name (`Registry::register_callback`), are usable from Rust and
//! from config (`--trainer.callbacks=[...]`, see [`crate::registered::build::callback`]).

mod by_name;
mod device_stats;
mod early_stopping;
mod ema;
mod finetuning;
mod lr_monitor;
mod model_checkpoint;
mod on_exception;
mod prediction_writer;
mod progress;
mod progress_bar_metrics;
mod swa;
mod throughput;
mod timer;
mod weight_averaging;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::module::ParamId;
use burn::tensor::TensorData;
use serde_json::Value;

pub use by_name::{BuiltCallbacks, CallbackFactory};
pub use device_stats::DeviceStatsMonitor;
pub use early_stopping::{EarlyStopping, EarlyStoppingConfig};
pub use ema::{EMAWeightAveraging, EmaConfig};
pub use finetuning::{BackboneFinetuning, BackboneFinetuningConfig, Freeze};
pub use lr_monitor::LearningRateMonitor;
pub use model_checkpoint::{ModelCheckpoint, ModelCheckpointConfig};
pub use on_exception::{OnExceptionCheckpoint, OnExceptionCheckpointConfig};
pub use prediction_writer::{
    JsonLinesConfig, JsonLinesWriter, PredictedBatch, PredictionWriter, WriteInterval,
    WritePredictions,
};
pub use progress::ProgressBar;
pub use progress_bar_metrics::{LazyValue, ProgressBarMetrics};
pub use swa::{AnnealingStrategy, StochasticWeightAveraging, SwaConfig, SwaEpochStart};
pub use throughput::{Throughput, ThroughputConfig, ThroughputMonitor};
pub use timer::{Timer, TimerClock, TimerConfig, TimerInterval};
pub use weight_averaging::AveragedWeights;

use crate::accelerator::DeviceStats;
use crate::checkpoint_io::CheckpointIO;
use crate::loggers::Loggers;
use crate::plugins::weights::Weights;
use crate::stage::Stage;

/// Whether a monitored value should go down or up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Lower is better (losses).
    #[default]
    Min,
    /// Higher is better (accuracies).
    Max,
}

impl Mode {
    /// Whether `new` beats `old` by more than `min_delta`.
    pub fn improves(self, new: f64, old: f64, min_delta: f64) -> bool {
        match self {
            Mode::Min => new < old - min_delta,
            Mode::Max => new > old + min_delta,
        }
    }
}

/// The loop's counters and latest metrics, as callbacks see them.
#[derive(Debug, Clone, Default)]
pub struct TrainerState {
    /// The entry point running.
    pub stage: Option<Stage>,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// Index of the batch just run in its loop.
    pub batch_idx: usize,
    /// Training batches completed in the current epoch (where a resumed run continues).
    pub batches_done: usize,
    /// Training batches per epoch.
    pub num_training_batches: usize,
    /// Items (samples) in the training batch just run: the loader's batch size, or fewer in
    /// an epoch's last batch.
    pub batch_size: usize,
    /// Batches of the evaluation pass running (validation, test or predict), of the loader
    /// running when there are several.
    pub num_eval_batches: usize,
    /// The loader of the evaluation batch just run (Lightning's `dataloader_idx`; 0 with one).
    pub dataloader_idx: usize,
    /// Epochs the run may take.
    pub max_epochs: u64,
    /// Epochs before early stopping may stop the run.
    pub min_epochs: u64,
    /// Whether the sanity check is running (callbacks usually ignore it).
    pub sanity_checking: bool,
    /// Set by a callback to end `fit` after the current step.
    pub should_stop: bool,
    /// The latest value of every logged metric (step and epoch values).
    pub callback_metrics: BTreeMap<String, f64>,
    /// Values marked `prog_bar`, read from the device when looked at (see
    /// [`ProgressBarMetrics`]).
    pub progress_bar_metrics: ProgressBarMetrics,
    /// The learning rate of the latest optimizer step.
    pub learning_rate: f64,
    /// Root of logs and checkpoints.
    pub default_root_dir: PathBuf,
    /// This run's log directory (`<root>/lightning_logs/version_N`), when it has one.
    pub log_dir: Option<PathBuf>,
    /// Whether this process is global rank 0 (the one that writes).
    pub is_global_zero: bool,
    /// This process's rank among all of the run's (Lightning's `trainer.global_rank`).
    pub global_rank: usize,
    /// Processes in the run (Lightning's `trainer.world_size`).
    pub world_size: usize,
    /// Steps between step-metric writes.
    pub log_every_n_steps: u64,
    /// Whether this is a fast dev run (no checkpoints, no logs).
    pub fast_dev_run: bool,
    /// Module paths (`backbone`, `encoder.layers.0`) whose float parameters take no gradients:
    /// a callback (BackboneFinetuning) edits it in `on_fit_start` and `on_train_epoch_start`,
    /// and `fit` freezes or unfreezes the model after those hooks. A module it does not name
    /// keeps what the model has.
    pub frozen_modules: BTreeMap<String, Freeze>,
    /// Learning-rate shares by module path: the optimizer steps those parameters at `share ×`
    /// the scheduler's rate, in a step of their own (burn's optimizers keep their state per
    /// parameter, so that is exactly a parameter group's rate).
    pub lr_factors: BTreeMap<String, f64>,
    /// A rate that replaces optimizer 0's scheduler from the next step on
    /// (StochasticWeightAveraging's, the learning-rate finder's), with the name of the callback
    /// that set it; the scheduler keeps stepping underneath. Set it with
    /// [`override_lr`](Self::override_lr).
    pub lr_override: Option<LrOverride>,
    /// Set by a callback in `on_fit_end` (StochasticWeightAveraging, after loading its
    /// average): `fit` then recomputes the batch-norm statistics for the weights the model
    /// holds with a forward pass over the training data.
    pub recompute_batch_norm: bool,
}

/// Where a callback that saves checkpoints writes them: `dirpath` when given, else the run's
/// checkpoint directory (`<log_dir>/checkpoints`, or `<default_root_dir>/checkpoints` without a
/// logger).
pub(crate) fn checkpoint_dir(dirpath: Option<&Path>, state: &TrainerState) -> PathBuf {
    match (dirpath, &state.log_dir) {
        (Some(dir), _) => dir.to_owned(),
        (None, Some(log_dir)) => log_dir.join("checkpoints"),
        (None, None) => state.default_root_dir.join("checkpoints"),
    }
}

/// A learning rate a callback set for optimizer 0 ([`TrainerState::lr_override`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LrOverride {
    /// The rate.
    pub rate: f64,
    /// The callback that set it, as its [`Callback::name`] gives it (errors name it).
    pub set_by: String,
}

impl TrainerState {
    /// Has optimizer 0 step at `rate` from the next step on, in place of its scheduler's;
    /// `set_by` names the callback for errors.
    pub fn override_lr(&mut self, rate: f64, set_by: &str) {
        self.lr_override = Some(LrOverride {
            rate,
            set_by: set_by.to_owned(),
        });
    }

    /// Whether the optimizer step just taken is one whose step metrics the Trainer logs (every
    /// `log_every_n_steps`-th); a callback that logs beside them remembers the step it logged,
    /// since a batch that only accumulates gradients leaves the global step as it was.
    pub fn logs_step_metrics(&self) -> bool {
        self.global_step > 0
            && self
                .global_step
                .is_multiple_of(self.log_every_n_steps.max(1))
    }

    /// The step metrics are logged at: during `fit`, the optimizer steps taken before the one
    /// just done (Lightning's `_batches_that_stepped` when it logs, so the first step's metrics
    /// are at step 0); otherwise the global step.
    pub fn log_step(&self) -> u64 {
        match self.stage {
            Some(Stage::Fit) => self.global_step.saturating_sub(1),
            _ => self.global_step,
        }
    }
}

/// Every callback's checkpointed state, by [`Callback::state_key`].
pub type CallbackStates = BTreeMap<String, Value>;

/// One callback's tensors in a checkpoint, by the names it gave them.
pub type CallbackTensors = BTreeMap<String, TensorData>;

/// What `callbacks` put into a checkpoint: their states (with `own_state`, the state of the
/// callback that saves, which is not among them), their tensors by state key, and their
/// edits of `weights` ([`Callback::on_save_checkpoint`]).
pub(crate) fn checkpoint_parts(
    callbacks: &[&dyn Callback],
    own_state: Option<(String, Value)>,
    weights: &mut [(String, ParamId, TensorData)],
) -> anyhow::Result<(CallbackStates, BTreeMap<String, CallbackTensors>)> {
    let mut states = CallbackStates::new();
    let mut tensors = BTreeMap::new();
    for c in callbacks {
        if let Some(state) = c.state() {
            states.insert(c.state_key(), state);
        }
        let mut own = CallbackTensors::new();
        let mut checkpoint = CheckpointTensors {
            weights: &mut *weights,
            own: &mut own,
        };
        (c.on_save_checkpoint(&mut checkpoint))
            .with_context(|| format!("in callback {}, saving a checkpoint", c.name()))?;
        if !own.is_empty() {
            tensors.insert(c.state_key(), own);
        }
    }
    states.extend(own_state);
    Ok((states, tensors))
}

/// The tensors of a checkpoint written or read during `fit` that a callback may rewrite
/// (Lightning's `on_save_checkpoint` and `on_load_checkpoint` on the checkpoint's dict).
pub struct CheckpointTensors<'a> {
    /// The model's weights: module path, burn's parameter id and data.
    pub weights: &'a mut [(String, ParamId, TensorData)],
    /// This callback's own tensors by name (in the file as `__callbacks__.<state key>.<name>`).
    pub own: &'a mut CallbackTensors,
}

/// Writes a checkpoint of the current model and optimizer to a path (during `fit`), with what
/// the callbacks given put into it, and the saving callback's own state.
pub(crate) type Saver<'a> = &'a dyn Fn(
    &Path,
    &TrainerState,
    &[&dyn Callback],
    Option<(String, Value)>,
) -> anyhow::Result<()>;

/// What a hook during `fit` reaches of the model: its weights, and the loss of the batch just
/// run.
pub(crate) trait ModelView {
    /// Calls `f` with the model's weights.
    fn with(&self, f: &mut dyn FnMut(&mut dyn Weights));
    /// The loss the training step returned for the latest batch (reading it waits for the
    /// device).
    fn loss(&self) -> Option<f64>;
}

/// What a hook gets besides the state.
pub struct CallbackContext<'a> {
    /// Counters and metrics; writable (`should_stop`).
    pub state: &'a mut TrainerState,
    /// The run's loggers (empty on ranks other than 0).
    pub loggers: &'a mut Loggers,
    pub(crate) saver: Option<Saver<'a>>,
    pub(crate) model: Option<&'a dyn ModelView>,
    /// The other callbacks (their states go into checkpoints saved from this hook).
    pub(crate) others: [&'a [Box<dyn Callback>]; 2],
    /// The calling callback's own state for those checkpoints, once it gave it.
    pub(crate) own_state: Option<(String, Value)>,
    pub(crate) io: &'a dyn CheckpointIO,
    pub(crate) device_stats: &'a dyn Fn() -> DeviceStats,
    /// What the callback logged in this hook, and whether each goes to the progress bar.
    pub(crate) logged: Vec<(String, f64, bool)>,
}

impl CallbackContext<'_> {
    /// Writes a checkpoint of the model and optimizer to `path` (only during `fit`), with the
    /// other callbacks' states and the caller's own, if it gave it
    /// ([`record_own_state`](Self::record_own_state)). States are read only here, when a
    /// checkpoint is written.
    pub fn save_checkpoint(&self, path: &Path) -> anyhow::Result<()> {
        let Some(save) = self.saver else {
            anyhow::bail!("checkpoints can only be saved during fit");
        };
        let others = self.others.iter().flat_map(|part| part.iter());
        let callbacks: Vec<&dyn Callback> = others.map(|c| c.as_ref()).collect();
        save(path, self.state, &callbacks, self.own_state.clone())
    }

    /// Calls `f` with the model's weights during `fit` (`None` in other entry points and in
    /// `setup` and `teardown`): to read them, or to load others in their place, as weight
    /// averaging does for validation.
    pub fn with_weights<T>(&mut self, f: impl FnOnce(&mut dyn Weights) -> T) -> Option<T> {
        let access = self.model?;
        let (mut f, mut out) = (Some(f), None);
        access.with(&mut |weights| out = f.take().map(|f| f(weights)));
        out
    }

    /// The calling callback's state, for the checkpoints it saves in this hook (a callback
    /// that changes its state and then saves, as ModelCheckpoint does, records the new one).
    pub fn record_own_state(&mut self, key: String, state: Value) {
        self.own_state = Some((key, state));
    }

    /// The loss the training step returned for the batch just run, unscaled and before
    /// accumulation divides it (Lightning's `outputs["loss"]` in `on_train_batch_end`): during
    /// `fit`, after automatic optimization's steps (`None` under manual optimization and
    /// elsewhere). Reading it waits for the device.
    pub fn loss(&self) -> Option<f64> {
        self.model?.loss()
    }

    /// Whether [`save_checkpoint`](Self::save_checkpoint) can save here.
    pub(crate) fn can_save(&self) -> bool {
        self.saver.is_some()
    }

    /// Removes a checkpoint written earlier.
    pub fn remove_checkpoint(&self, path: &Path) -> anyhow::Result<()> {
        self.io.remove(path)
    }

    /// The device's current figures (the accelerator's `device_stats`).
    pub fn device_stats(&self) -> DeviceStats {
        (self.device_stats)()
    }

    /// Logs `value` as `name` (Lightning's `self.log` in a callback): once the hook has run
    /// on every callback, what they logged reaches `callback_metrics` and every logger, at the
    /// current step with the epoch, as the loop's own epoch values do. On a rank other than 0
    /// it reaches that rank's `callback_metrics` only (loggers run on rank 0). A hook called at
    /// every batch that should follow `log_every_n_steps` checks
    /// [`TrainerState::logs_step_metrics`] first.
    pub fn log(&mut self, name: impl Into<String>, value: f64) {
        self.logged.push((name.into(), value, false));
    }

    /// [`log`](Self::log), and shown in the progress bar.
    pub fn log_prog_bar(&mut self, name: impl Into<String>, value: f64) {
        self.logged.push((name.into(), value, true));
    }
}

/// Hooks the Trainer calls, in Lightning's order. Every hook defaults to doing nothing.
#[allow(unused_variables)]
pub trait Callback {
    /// A name for messages, e.g. `ModelCheckpoint`.
    fn name(&self) -> &str;

    /// The key of this callback's state in checkpoints: its name, plus whatever tells two
    /// callbacks of the same kind apart (ModelCheckpoint adds its monitor and directory).
    fn state_key(&self) -> String {
        self.name().to_owned()
    }

    /// What a checkpoint keeps of this callback (Lightning's `state_dict`); `None` for nothing.
    fn state(&self) -> Option<Value> {
        None
    }

    /// Restores what [`state`](Self::state) returned, when `fit` resumes from a checkpoint.
    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        Ok(())
    }

    /// When a checkpoint is written during `fit` (by any callback but this one, or on a stop
    /// signal): may replace the weights it holds and add tensors of its own (weight averaging
    /// saves its averages as the weights, and the weights training continues from as its own).
    fn on_save_checkpoint(&self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// When `fit` resumes, after [`load_state`](Self::load_state) and before the weights are
    /// loaded into the model: gets what [`on_save_checkpoint`](Self::on_save_checkpoint) left
    /// and may edit the weights (empty `own` tensors when the checkpoint has none of its own).
    fn on_load_checkpoint(&mut self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// A directory this callback writes checkpoints to, when it is not the run's default
    /// (where `ckpt_path=last|best` also looks).
    fn checkpoint_dirpath(&self) -> Option<PathBuf> {
        None
    }

    /// Before anything runs, in every entry point.
    fn setup(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// Start of `fit`, after the sanity check setup.
    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// Start of a training epoch.
    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// After each training batch (and its optimizer step, when one was taken).
    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// End of a training epoch, after its validation and its epoch metrics.
    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// Start of a validation pass (also the sanity check).
    fn on_validation_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// After each validation batch.
    fn on_validation_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// End of a validation pass, with its epoch metrics in `callback_metrics`.
    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// Start of a test pass.
    fn on_test_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// After each test batch.
    fn on_test_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// End of a test pass.
    fn on_test_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// After each predict batch, with its prediction (Lightning's `outputs`).
    fn on_predict_batch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    /// After every predict loader has run: this rank's predictions of all of them, in order,
    /// when they were kept (`--trainer.return_predictions`, or a callback that
    /// [`keeps_predictions`](Self::keeps_predictions)); none otherwise.
    fn on_predict_epoch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        predictions: &[PredictedBatch],
    ) -> anyhow::Result<()> {
        Ok(())
    }
    /// End of `fit`, when it ended without error.
    fn on_fit_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// When a loop fails; the error is returned to the caller after every callback has seen it.
    /// In `fit`, for an error from the data, a callback, validation or a logger, or a panic in
    /// `training_step`, it runs while the loop still holds the model of the last completed step:
    /// `save_checkpoint` and `with_weights` work here then (OnExceptionCheckpoint saves).
    fn on_exception(&mut self, ctx: &mut CallbackContext<'_>, error: &anyhow::Error) {}
    /// Last, in every entry point, whether it failed or not.
    fn teardown(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Whether `on_predict_epoch_end` needs this rank's predictions (a writer that writes them
    /// all at once): `predict` then keeps them even with `return_predictions` off.
    fn keeps_predictions(&self) -> bool {
        false
    }
    /// Whether this is a ModelCheckpoint (then the Trainer adds no default one).
    fn is_model_checkpoint(&self) -> bool {
        false
    }
    /// The best checkpoint it wrote, if it tracks one.
    fn best_model_path(&self) -> Option<PathBuf> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_compare_with_min_delta() {
        assert!(Mode::Min.improves(0.5, 0.7, 0.1));
        assert!(!Mode::Min.improves(0.65, 0.7, 0.1));
        assert!(Mode::Max.improves(0.9, 0.7, 0.0));
        assert!(!Mode::Max.improves(0.7, 0.7, 0.0));
    }
}
