//! EarlyStopping: stop `fit` when a monitored metric stops improving.

use serde::Deserialize;

use super::{Callback, CallbackContext, Mode};
use crate::error::{FlagError, PlanResult, list};

/// EarlyStopping's settings (`init_args` in config).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EarlyStoppingConfig {
    /// The metric to watch, e.g. `val_loss`.
    pub monitor: String,
    /// Whether lower or higher is better.
    pub mode: Mode,
    /// Validation checks without improvement before stopping.
    pub patience: u64,
    /// Smallest change that counts as an improvement.
    pub min_delta: f64,
    /// Stop when the metric is NaN or infinite.
    pub check_finite: bool,
    /// Stop as soon as the metric is at least this good.
    pub stopping_threshold: Option<f64>,
    /// Stop as soon as the metric is this bad.
    pub divergence_threshold: Option<f64>,
}

impl Default for EarlyStoppingConfig {
    fn default() -> Self {
        Self {
            monitor: String::new(),
            mode: Mode::Min,
            patience: 3,
            min_delta: 0.0,
            check_finite: true,
            stopping_threshold: None,
            divergence_threshold: None,
        }
    }
}

impl EarlyStoppingConfig {
    /// Watches `monitor` with the other settings at their defaults.
    pub fn new(monitor: &str, mode: Mode) -> Self {
        Self {
            monitor: monitor.to_owned(),
            mode,
            ..Self::default()
        }
    }
}

/// Stops `fit` after `patience` validation checks without improvement of `monitor`.
/// Everything but the config is its checkpointed state (Lightning's `state_dict`).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct EarlyStopping {
    #[serde(skip)]
    config: EarlyStoppingConfig,
    best: Option<f64>,
    wait: u64,
    /// The epoch in which it stopped the run, if it did.
    pub stopped_epoch: Option<u64>,
    /// Why it stopped the run.
    pub reason: Option<String>,
}

impl EarlyStopping {
    /// An EarlyStopping with these settings; `monitor` must be set and `min_delta` ≥ 0.
    pub fn new(config: EarlyStoppingConfig) -> PlanResult<Self> {
        if config.monitor.is_empty() {
            return Err(FlagError::new(
                "--trainer.callbacks",
                "EarlyStopping",
                "EarlyStopping needs init_args.monitor, the metric to watch (e.g. val_loss)",
            ));
        }
        if config.min_delta.is_nan() || config.min_delta < 0.0 {
            return Err(FlagError::new(
                "--trainer.callbacks",
                config.min_delta.to_string(),
                "EarlyStopping min_delta must be a number >= 0",
            ));
        }
        Ok(Self {
            config,
            best: None,
            wait: 0,
            stopped_epoch: None,
            reason: None,
        })
    }

    /// Validation checks since the last improvement.
    pub fn wait_count(&self) -> u64 {
        self.wait
    }

    /// The best value seen.
    pub fn best_score(&self) -> Option<f64> {
        self.best
    }

    fn check(&mut self, value: f64) -> Option<String> {
        let c = &self.config;
        if c.check_finite && !value.is_finite() {
            return Some(format!("{} = {value} is not finite", c.monitor));
        }
        if let Some(t) = c.stopping_threshold
            && (value == t || c.mode.improves(value, t, 0.0))
        {
            return Some(format!(
                "{} = {value} reached stopping_threshold {t}",
                c.monitor
            ));
        }
        if let Some(t) = c.divergence_threshold
            && (value == t || c.mode.improves(t, value, 0.0))
        {
            return Some(format!(
                "{} = {value} passed divergence_threshold {t}",
                c.monitor
            ));
        }
        match self.best {
            Some(best) if !c.mode.improves(value, best, c.min_delta) => {
                self.wait += 1;
                (self.wait >= c.patience).then(|| {
                    format!(
                        "{} did not improve for {} checks; best {best}",
                        c.monitor, self.wait
                    )
                })
            }
            _ => {
                self.best = Some(value);
                self.wait = 0;
                None
            }
        }
    }
}

impl Callback for EarlyStopping {
    fn name(&self) -> &str {
        "EarlyStopping"
    }

    fn state_key(&self) -> String {
        format!(
            "EarlyStopping{{monitor={},mode={:?}}}",
            self.config.monitor, self.config.mode
        )
    }

    fn state(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn load_state(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        let saved: Self = serde_json::from_value(state.clone())?;
        *self = Self {
            config: self.config.clone(),
            ..saved
        };
        Ok(())
    }

    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if ctx.state.sanity_checking {
            return Ok(());
        }
        let Some(&value) = ctx.state.callback_metrics.get(&self.config.monitor) else {
            anyhow::bail!(
                "EarlyStopping could not find monitor `{}` among the logged metrics ({}); log it in validation_step",
                self.config.monitor,
                list(ctx.state.callback_metrics.keys())
            );
        };
        if let Some(reason) = self.check(value) {
            tracing::info!(target: "ember", "EarlyStopping: {reason}; stopping");
            ctx.state.should_stop = true;
            self.stopped_epoch = Some(ctx.state.epoch);
            self.reason = Some(reason);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_after_patience_checks_without_improvement() {
        let mut es = EarlyStopping::new(EarlyStoppingConfig {
            patience: 2,
            ..EarlyStoppingConfig::new("val_loss", Mode::Min)
        })
        .unwrap();
        assert!(es.check(1.0).is_none());
        assert!(es.check(0.9).is_none());
        assert!(es.check(0.95).is_none());
        assert_eq!(es.wait_count(), 1);
        assert!(es.check(0.9).is_some());
        assert_eq!(es.best_score(), Some(0.9));
    }

    #[test]
    fn thresholds_and_non_finite_values_stop_at_once() {
        let mut es = EarlyStopping::new(EarlyStoppingConfig {
            stopping_threshold: Some(0.95),
            ..EarlyStoppingConfig::new("val_acc", Mode::Max)
        })
        .unwrap();
        assert!(es.check(0.9).is_none());
        assert!(es.check(0.96).unwrap().contains("stopping_threshold"));
        let mut es = EarlyStopping::new(EarlyStoppingConfig::new("val_loss", Mode::Min)).unwrap();
        assert!(es.check(f64::NAN).unwrap().contains("not finite"));
        assert!(EarlyStopping::new(EarlyStoppingConfig::default()).is_err());
    }
}
