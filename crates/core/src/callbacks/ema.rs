//! EMAWeightAveraging: validates, saves and ends `fit` with an exponential moving average of the
//! weights (Lightning's `EMAWeightAveraging`).

use serde::Deserialize;
use serde_json::Value;

use super::weight_averaging::{AveragedWeights, Counters, Rule};
use super::{Callback, CallbackContext, CheckpointTensors};
use crate::error::{FlagError, PlanResult};

/// EMAWeightAveraging's settings (Lightning's names and defaults).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmaConfig {
    /// How much of the average each update keeps.
    pub decay: f64,
    /// Update after every n-th optimizer step (0: never after steps).
    pub update_every_n_steps: u64,
    /// Update after steps only from this step index (0-based) on.
    pub update_starting_at_step: Option<u64>,
    /// Update at the end of each epoch from this epoch (0-based) on.
    pub update_starting_at_epoch: Option<u64>,
}

impl Default for EmaConfig {
    fn default() -> Self {
        Self {
            decay: 0.999,
            update_every_n_steps: 1,
            update_starting_at_step: None,
            update_starting_at_epoch: None,
        }
    }
}

/// Keeps an exponential moving average of the model's weights (parameters and batch-norm
/// statistics): updated after optimizer steps (and epochs) as [`EmaConfig`] says, swapped into
/// the model for every validation pass, saved as the checkpoint's weights (the weights training
/// continues from are saved beside them, so a resumed fit continues exactly), and loaded into
/// the model when `fit` ends. Lightning's `EMAWeightAveraging`.
#[derive(Debug, Clone)]
pub struct EMAWeightAveraging {
    config: EmaConfig,
    averaged: AveragedWeights,
    counters: Counters,
}

impl EMAWeightAveraging {
    /// A callback with these settings; `decay` must be in [0, 1].
    pub fn new(config: EmaConfig) -> PlanResult<Self> {
        if !(0.0..=1.0).contains(&config.decay) {
            return Err(FlagError::new(
                "--trainer.callbacks",
                config.decay.to_string(),
                "EMAWeightAveraging decay must be a number in [0, 1]",
            ));
        }
        Ok(Self {
            config,
            averaged: AveragedWeights::default(),
            counters: Counters::default(),
        })
    }

    /// The average as it stands.
    pub fn averaged(&self) -> &AveragedWeights {
        &self.averaged
    }

    /// Whether to update after optimizer step `step_idx` or epoch `epoch_idx` (0-based; one
    /// of them is given), as Lightning's `should_update` decides.
    pub fn should_update(&self, step_idx: Option<u64>, epoch_idx: Option<u64>) -> bool {
        let c = &self.config;
        let by_step = step_idx.is_some_and(|step| {
            c.update_starting_at_step.is_none_or(|start| step >= start)
                && c.update_every_n_steps > 0
                && step % c.update_every_n_steps == 0
        });
        let by_epoch = epoch_idx
            .zip(c.update_starting_at_epoch)
            .is_some_and(|(epoch, start)| epoch >= start);
        by_step || by_epoch
    }

    fn update(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let rule = Rule::Ema {
            decay: self.config.decay,
        };
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.update(w, rule))
            .unwrap_or(Ok(()))
    }
}

impl Callback for EMAWeightAveraging {
    fn name(&self) -> &str {
        "EMAWeightAveraging"
    }

    fn state(&self) -> Option<Value> {
        self.counters.state(&self.averaged)
    }

    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        self.counters = Counters::load(state, &mut self.averaged)?;
        Ok(())
    }

    fn on_save_checkpoint(&self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        self.averaged.save_as_weights(checkpoint);
        Ok(())
    }

    fn on_load_checkpoint(&mut self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        if checkpoint.own.is_empty() {
            tracing::warn!(
                target: "ember",
                "the checkpoint was not written with EMAWeightAveraging: the average starts at its weights"
            );
        }
        self.averaged.load_from_weights(checkpoint);
        Ok(())
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.start(w));
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let step = ctx.state.global_step;
        if step > self.counters.latest_update_step && self.should_update(Some(step - 1), None) {
            self.update(ctx)?;
            self.counters.latest_update_step = step;
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let epoch = ctx.state.epoch;
        let later = self.counters.latest_update_epoch.is_none_or(|e| epoch > e);
        if later && self.should_update(None, Some(epoch)) {
            self.update(ctx)?;
            self.counters.latest_update_epoch = Some(epoch);
        }
        Ok(())
    }

    fn on_validation_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.swap_in(w)).unwrap_or(Ok(()))
    }

    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.swap_out(w)).unwrap_or(Ok(()))
    }

    fn on_fit_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.copy_in(w)).unwrap_or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ema(config: EmaConfig) -> EMAWeightAveraging {
        EMAWeightAveraging::new(config).unwrap()
    }

    #[test]
    fn updates_follow_lightnings_should_update() {
        // Lightning's EMAWeightAveraging.should_update: every n-th step index from a start,
        // and epochs only from update_starting_at_epoch.
        let every_3 = ema(EmaConfig {
            update_every_n_steps: 3,
            update_starting_at_step: Some(4),
            ..Default::default()
        });
        let steps: Vec<u64> = (0..12)
            .filter(|&s| every_3.should_update(Some(s), None))
            .collect();
        assert_eq!(steps, [6, 9]);
        assert!(!every_3.should_update(None, Some(5)));
        let by_epoch = ema(EmaConfig {
            update_every_n_steps: 0,
            update_starting_at_epoch: Some(2),
            ..Default::default()
        });
        assert!(!by_epoch.should_update(Some(0), None));
        assert!(!by_epoch.should_update(None, Some(1)));
        assert!(by_epoch.should_update(None, Some(2)));
        assert!(
            EMAWeightAveraging::new(EmaConfig {
                decay: 1.5,
                ..Default::default()
            })
            .is_err()
        );
    }
}
