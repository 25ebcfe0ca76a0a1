//! StochasticWeightAveraging: the mean of the weights of the last epochs, trained at a constant
//! or annealed rate, which the model takes when `fit` ends (Lightning's
//! `StochasticWeightAveraging`, after Izmailov et al., 2018).

use serde::Deserialize;
use serde_json::Value;

use super::weight_averaging::{AveragedWeights, Counters, Rule};
use super::{Callback, CallbackContext, CheckpointTensors};
use crate::error::{FlagError, PlanResult};

/// When averaging starts: an epoch (1-based, as Lightning counts it here) or a share of
/// `max_epochs`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SwaEpochStart {
    /// The epoch, counted from 1.
    Epoch(u64),
    /// A share of `max_epochs`, in [0, 1].
    Fraction(f64),
}

/// How the rate goes from the scheduler's to `swa_lrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnealingStrategy {
    /// Along half a cosine.
    #[default]
    Cos,
    /// Along a line.
    Linear,
}

/// StochasticWeightAveraging's settings (Lightning's names and defaults).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwaConfig {
    /// The rate averaging trains at (required).
    pub swa_lrs: Option<f64>,
    /// When averaging starts.
    pub swa_epoch_start: SwaEpochStart,
    /// Epochs the rate takes to reach `swa_lrs`.
    pub annealing_epochs: u64,
    /// How it gets there.
    pub annealing_strategy: AnnealingStrategy,
}

impl Default for SwaConfig {
    fn default() -> Self {
        Self {
            swa_lrs: None,
            swa_epoch_start: SwaEpochStart::Fraction(0.8),
            annealing_epochs: 10,
            annealing_strategy: AnnealingStrategy::Cos,
        }
    }
}

/// Averages the weights (with the equally weighted mean) at the start of every epoch from
/// `swa_epoch_start` to the last, while optimizer 0 trains at a rate annealed from the
/// scheduler's to `swa_lrs` over `annealing_epochs` epochs, then held there (torch's `SWALR`,
/// in place of the model's scheduler, one rate per epoch). When the last epoch has run, the
/// model takes the average and, when it has batch-norm layers, `fit` recomputes their
/// statistics with one forward pass over the training data. The average is in checkpoints
/// (as tensors beside the weights), so a resumed fit ends where the uninterrupted one ends.
///
/// As Lightning's: the average takes the weights at each epoch's start, so the last epoch's
/// training is not in it; the model is validated (and saved) with its own weights. The rate
/// annealing starts from is the rate of the last step before averaging starts (`swa_lrs`
/// itself when averaging starts at the first epoch).
#[derive(Debug, Clone)]
pub struct StochasticWeightAveraging {
    config: SwaConfig,
    swa_lr: f64,
    averaged: AveragedWeights,
    counters: Counters,
    /// The rate annealing starts from, once averaging has started.
    start_lr: Option<f64>,
}

/// The flag errors of a bad setting.
fn refuse(value: impl ToString, message: &str) -> FlagError {
    FlagError::new(
        "--trainer.callbacks",
        value.to_string(),
        format!("StochasticWeightAveraging {message}"),
    )
}

impl StochasticWeightAveraging {
    /// A callback with these settings: `swa_lrs` a number > 0, `swa_epoch_start` an epoch ≥ 1
    /// or a share in [0, 1].
    pub fn new(config: SwaConfig) -> PlanResult<Self> {
        let swa_lr = match config.swa_lrs {
            Some(lr) if lr.is_finite() && lr > 0.0 => lr,
            Some(lr) => return Err(refuse(lr, "swa_lrs must be a number > 0")),
            None => {
                let message = "needs swa_lrs, the rate averaging trains at";
                return Err(refuse("StochasticWeightAveraging", message));
            }
        };
        match config.swa_epoch_start {
            SwaEpochStart::Epoch(0) => {
                return Err(refuse(
                    0,
                    "swa_epoch_start must be an epoch >= 1 or a share in [0, 1]",
                ));
            }
            SwaEpochStart::Fraction(f) if !(0.0..=1.0).contains(&f) => {
                return Err(refuse(
                    f,
                    "swa_epoch_start must be an epoch >= 1 or a share in [0, 1]",
                ));
            }
            _ => {}
        }
        Ok(Self {
            config,
            swa_lr,
            averaged: AveragedWeights::default(),
            counters: Counters::default(),
            start_lr: None,
        })
    }

    /// The average as it stands.
    pub fn averaged(&self) -> &AveragedWeights {
        &self.averaged
    }

    /// The first and last epochs (0-based) whose starts are averaged, in a fit of
    /// `max_epochs` (Lightning's `swa_start` and `swa_end`).
    pub fn epochs(&self, max_epochs: u64) -> (u64, u64) {
        let start = match self.config.swa_epoch_start {
            SwaEpochStart::Epoch(e) => e,
            SwaEpochStart::Fraction(f) => (max_epochs as f64 * f) as u64,
        };
        (start.saturating_sub(1), max_epochs.saturating_sub(1))
    }

    /// The rate in epoch `since` of averaging (0 for the first), annealing from `from`.
    pub fn rate(&self, from: f64, since: u64) -> f64 {
        let epochs = self.config.annealing_epochs;
        let t = match epochs {
            0 => 1.0,
            n => (since as f64 / n as f64).min(1.0),
        };
        let alpha = match self.config.annealing_strategy {
            AnnealingStrategy::Cos => (1.0 - (std::f64::consts::PI * t).cos()) / 2.0,
            AnnealingStrategy::Linear => t,
        };
        self.swa_lr * alpha + from * (1.0 - alpha)
    }
}

/// What a checkpoint keeps of SWA besides the average's tensors.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
struct SwaState {
    counters: Value,
    start_lr: Option<f64>,
}

impl Callback for StochasticWeightAveraging {
    fn name(&self) -> &str {
        "StochasticWeightAveraging"
    }

    fn state(&self) -> Option<Value> {
        let state = SwaState {
            counters: self.counters.state(&self.averaged)?,
            start_lr: self.start_lr,
        };
        serde_json::to_value(state).ok()
    }

    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        let state: SwaState = serde_json::from_value(state.clone())?;
        self.counters = Counters::load(&state.counters, &mut self.averaged)?;
        self.start_lr = state.start_lr;
        Ok(())
    }

    fn on_save_checkpoint(&self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        self.averaged.save_beside(checkpoint);
        Ok(())
    }

    fn on_load_checkpoint(&mut self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        self.averaged.load_beside(checkpoint);
        Ok(())
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if ctx.state.max_epochs == u64::MAX {
            return Err(FlagError::new(
                "--trainer.max_epochs",
                "null",
                "a number of epochs under StochasticWeightAveraging (its start and end are epochs)",
            )
            .into());
        }
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.start(w));
        Ok(())
    }

    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let epoch = ctx.state.epoch;
        let (start, end) = self.epochs(ctx.state.max_epochs);
        if epoch < start {
            return Ok(());
        }
        let from = *self.start_lr.get_or_insert(match ctx.state.global_step {
            0 => self.swa_lr,
            _ => ctx.state.learning_rate,
        });
        ctx.state
            .override_lr(self.rate(from, epoch - start), self.name());
        let later = self.counters.latest_update_epoch.is_none_or(|e| epoch > e);
        if epoch <= end && later {
            let averaged = &mut self.averaged;
            ctx.with_weights(|w| averaged.update(w, Rule::Mean))
                .unwrap_or(Ok(()))?;
            self.counters.latest_update_epoch = Some(epoch);
        }
        Ok(())
    }

    fn on_fit_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let state = &ctx.state;
        let (_, end) = self.epochs(state.max_epochs);
        let ended = state.epoch == end && state.batches_done >= state.num_training_batches;
        if !ended || self.averaged.n_averaged() == 0 {
            return Ok(());
        }
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.copy_in(w))
            .unwrap_or(Ok(()))?;
        ctx.state.recompute_batch_norm = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swa(args: Value) -> PlanResult<StochasticWeightAveraging> {
        let class_path = "lightning.pytorch.callbacks.StochasticWeightAveraging";
        let config = crate::options::init_args(class_path, &args)?;
        StochasticWeightAveraging::new(config)
    }

    #[test]
    fn the_start_is_an_epoch_from_one_or_a_share_of_max_epochs() {
        // Lightning: swa_start = max(swa_epoch_start - 1, 0); a float is int(max_epochs * f).
        let at = |start: Value| {
            swa(serde_json::json!({"swa_lrs": 0.05, "swa_epoch_start": start}))
                .unwrap()
                .epochs(10)
        };
        assert_eq!(at(serde_json::json!(1)), (0, 9));
        assert_eq!(at(serde_json::json!(4)), (3, 9));
        assert_eq!(at(serde_json::json!(0.8)), (7, 9));
        assert_eq!(at(serde_json::json!(1.0)), (9, 9));
        for bad in [serde_json::json!(0), serde_json::json!(1.5)] {
            let e = swa(serde_json::json!({"swa_lrs": 0.05, "swa_epoch_start": bad})).unwrap_err();
            assert!(e.message.contains("swa_epoch_start"), "{e}");
        }
        let e = swa(serde_json::json!({})).unwrap_err();
        assert!(e.message.contains("swa_lrs"), "{e}");
        let e = swa(serde_json::json!({"swa_lrs": -1.0})).unwrap_err();
        assert!(e.message.contains("> 0"), "{e}");
    }

    #[test]
    fn the_rate_anneals_as_swalr() {
        // torch's SWALR: lr = swa_lr * alpha + lr0 * (1 - alpha), alpha = anneal(t / epochs).
        let cos = swa(serde_json::json!({"swa_lrs": 0.1, "annealing_epochs": 2})).unwrap();
        assert_eq!(cos.rate(1.0, 0), 1.0);
        assert!(
            (cos.rate(1.0, 1) - 0.55).abs() < 1e-12,
            "half way: cos(pi/2)"
        );
        assert!((cos.rate(1.0, 2) - 0.1).abs() < 1e-12);
        assert!((cos.rate(1.0, 7) - 0.1).abs() < 1e-12, "then held");
        let linear = swa(serde_json::json!({
            "swa_lrs": 0.1, "annealing_epochs": 4, "annealing_strategy": "linear"
        }))
        .unwrap();
        assert!((linear.rate(1.0, 1) - 0.775).abs() < 1e-12);
        let at_once = swa(serde_json::json!({"swa_lrs": 0.1, "annealing_epochs": 0})).unwrap();
        assert_eq!(
            at_once.rate(1.0, 0),
            0.1,
            "no annealing: swa_lrs from the start"
        );
    }
}
