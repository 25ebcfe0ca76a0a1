//! ProgressBar: a bar per training epoch on a terminal (indicatif), a line per epoch elsewhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar as Bar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;

use super::{Callback, CallbackContext};
use crate::loggers::shown;

/// ProgressBar's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProgressBarConfig {
    /// Redraw every N batches.
    pub refresh_rate: u64,
}

impl Default for ProgressBarConfig {
    fn default() -> Self {
        Self { refresh_rate: 1 }
    }
}

/// Shows training progress on stderr: an indicatif bar when stderr is a terminal, otherwise
/// one line per epoch with the metrics logged with `prog_bar`.
pub struct ProgressBar {
    config: ProgressBarConfig,
    terminal: bool,
    bar: Option<Bar>,
    epoch_start: Option<Instant>,
}

impl ProgressBar {
    /// A progress bar with these settings.
    pub fn new(config: ProgressBarConfig) -> Self {
        Self {
            config,
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            epoch_start: None,
        }
    }
}

fn metrics_text(metrics: &BTreeMap<String, f64>) -> String {
    let mut text = String::new();
    for (name, value) in metrics {
        let _ = write!(
            text,
            "{}{name}={}",
            if text.is_empty() { "" } else { " " },
            shown(*value)
        );
    }
    text
}

fn epoch_label(ctx: &CallbackContext<'_>) -> String {
    match ctx.state.max_epochs {
        u64::MAX => format!("epoch {}", ctx.state.epoch + 1),
        max => format!("epoch {}/{max}", ctx.state.epoch + 1),
    }
}

impl Callback for ProgressBar {
    fn name(&self) -> &str {
        "ProgressBar"
    }

    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        // One progress display per run, as Lightning's: rank 0's.
        if !ctx.state.is_global_zero {
            return Ok(());
        }
        self.epoch_start = Some(Instant::now());
        if self.terminal {
            let bar = Bar::with_draw_target(
                Some(ctx.state.num_training_batches as u64),
                ProgressDrawTarget::stderr(),
            );
            // The rate reads as Lightning's (tqdm's): `12.34it/s`.
            let style = ProgressStyle::with_template(
                "{prefix} {bar:30} {pos}/{len} [{elapsed}<{eta}, {rate}] {msg}",
            )?
            .with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.2}it/s", state.per_sec());
                },
            );
            bar.set_style(style);
            bar.set_prefix(epoch_label(ctx));
            self.bar = Some(bar);
        }
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if let Some(bar) = &self.bar {
            let done = ctx.state.batch_idx as u64 + 1;
            if done.is_multiple_of(self.config.refresh_rate.max(1)) {
                bar.set_position(done);
                bar.set_message(metrics_text(&ctx.state.progress_bar_metrics.values()));
            }
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if !ctx.state.is_global_zero {
            return Ok(());
        }
        // The epoch's line says what fit's summary line says (every epoch-level metric, train
        // and validation), and what is marked `prog_bar`.
        let mut shown = ctx.state.callback_metrics.clone();
        shown.extend(ctx.state.progress_bar_metrics.values());
        let metrics = metrics_text(&shown);
        match self.bar.take() {
            Some(bar) => {
                bar.set_position(ctx.state.num_training_batches as u64);
                bar.finish_with_message(metrics);
            }
            None => {
                let seconds = self.epoch_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
                eprintln!("{}  {metrics}  ({seconds:.2} s)", epoch_label(ctx));
            }
        }
        Ok(())
    }

    fn on_exception(&mut self, _ctx: &mut CallbackContext<'_>, _error: &anyhow::Error) {
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
    }
}
