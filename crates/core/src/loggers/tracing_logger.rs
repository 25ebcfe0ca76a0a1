//! The text logger: metrics as `tracing` events (target `ember::metrics`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::Logger;

/// Emits each metrics record as one `tracing` info event; shown with `RUST_LOG=ember=info`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingLogger;

impl Logger for TracingLogger {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        tracing::debug!(target: "ember::metrics", %hparams, "hyperparameters");
        Ok(())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        let mut text = String::new();
        for (name, value) in metrics {
            let _ = write!(text, " {name}={value}");
        }
        tracing::info!(target: "ember::metrics", step, "{}", text.trim_start());
        Ok(())
    }
}
