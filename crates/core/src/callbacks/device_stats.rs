//! DeviceStatsMonitor: logs the accelerator's `device_stats` through the run's loggers.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Callback, CallbackContext};

/// DeviceStatsMonitor's settings (none yet; `{}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceStatsMonitorConfig {}

/// Logs every figure of the accelerator's `device_stats` as `device_stats/NAME` every
/// `log_every_n_steps` optimizer steps.
#[derive(Debug, Clone, Default)]
pub struct DeviceStatsMonitor {
    last_step: Option<u64>,
}

impl DeviceStatsMonitor {
    /// A monitor.
    pub fn new(_config: DeviceStatsMonitorConfig) -> Self {
        Self::default()
    }
}

impl Callback for DeviceStatsMonitor {
    fn name(&self) -> &str {
        "DeviceStatsMonitor"
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let step = ctx.state.log_step();
        if !step.is_multiple_of(ctx.state.log_every_n_steps.max(1)) || self.last_step == Some(step)
        {
            return Ok(());
        }
        self.last_step = Some(step);
        let metrics: BTreeMap<String, f64> = ctx
            .device_stats()
            .into_iter()
            .map(|(k, v)| (format!("device_stats/{k}"), v))
            .collect();
        ctx.loggers.log_metrics(&metrics, step)
    }
}
