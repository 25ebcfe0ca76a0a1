//! LearningRateMonitor: logs the learning rate through the run's loggers.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Callback, CallbackContext};

/// When the learning rate is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingInterval {
    /// Every `log_every_n_steps` optimizer steps.
    #[default]
    Step,
    /// Once per epoch.
    Epoch,
}

/// LearningRateMonitor's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearningRateMonitorConfig {
    /// When to log.
    pub logging_interval: LoggingInterval,
}

/// Logs `lr` (the learning rate of the latest optimizer step).
#[derive(Debug, Clone, Default)]
pub struct LearningRateMonitor {
    config: LearningRateMonitorConfig,
    last_step: Option<u64>,
}

impl LearningRateMonitor {
    /// A monitor with these settings.
    pub fn new(config: LearningRateMonitorConfig) -> Self {
        Self {
            config,
            last_step: None,
        }
    }

    fn log(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let step = ctx.state.log_step();
        if step == 0 || self.last_step == Some(step) {
            return Ok(());
        }
        self.last_step = Some(step);
        let metrics = BTreeMap::from([("lr".to_owned(), ctx.state.learning_rate)]);
        ctx.loggers.log_metrics(&metrics, step)
    }
}

impl Callback for LearningRateMonitor {
    fn name(&self) -> &str {
        "LearningRateMonitor"
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.config.logging_interval == LoggingInterval::Step && ctx.state.logs_step_metrics() {
            self.log(ctx)?;
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.config.logging_interval == LoggingInterval::Epoch {
            self.log(ctx)?;
        }
        Ok(())
    }
}
