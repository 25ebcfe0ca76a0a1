//! DeviceStatsMonitor: logs the accelerator's `device_stats` through the run's loggers.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Callback, CallbackContext};

/// DeviceStatsMonitor's settings (none yet; `{}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceStatsMonitorConfig {}

/// Logs every figure of the accelerator's `device_stats` as `device_stats/NAME` at the steps
/// the Trainer logs its step metrics (every `log_every_n_steps` optimizer steps, at the same
/// step numbers, as Lightning's monitor does). Figures over an interval (the CPU's
/// `cpu_percent`) cover the steps since the previous row, the first since the fit started.
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

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        // Starts the interval the first row's figures cover.
        ctx.device_stats();
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let stepped = ctx.state.global_step;
        if !ctx.state.logs_step_metrics() || self.last_step == Some(stepped) {
            return Ok(());
        }
        self.last_step = Some(stepped);
        let metrics: BTreeMap<String, f64> = ctx
            .device_stats()
            .into_iter()
            .map(|(k, v)| (format!("device_stats/{k}"), v))
            .collect();
        ctx.loggers.log_metrics(&metrics, ctx.state.log_step())
    }
}
