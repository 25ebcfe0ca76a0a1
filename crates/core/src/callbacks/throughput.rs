//! ThroughputMonitor: training batches, samples, items (tokens) and FLOPs per second, and the
//! model's FLOPs utilisation (MFU), over a window of batches (Lightning's callback and its
//! `Throughput` arithmetic).

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use serde::Deserialize;

use super::{Callback, CallbackContext};
use crate::error::{FlagError, PlanResult};

/// ThroughputMonitor's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThroughputConfig {
    /// Batches the rates are measured over (Lightning's `window_size`); rates are logged once
    /// that many batches have run.
    pub window_size: usize,
    /// Items per sample, e.g. a sequence's tokens (Lightning's `length_fn`, as a constant):
    /// adds `items_per_sec`.
    pub items_per_sample: Option<f64>,
    /// Training FLOPs per sample (forward and backward, ~3× the forward's): adds
    /// `flops_per_sec`.
    pub flops_per_sample: Option<f64>,
    /// The device's peak FLOP/s (Lightning's `available_flops`): adds `mfu`, the share of it
    /// the training reaches.
    pub available_flops: Option<f64>,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        Self {
            window_size: 100,
            items_per_sample: None,
            flops_per_sample: None,
            available_flops: None,
        }
    }
}

/// The running totals one process reports after each batch, and the rates over the last
/// `window_size` of them.
#[derive(Debug, Clone)]
pub struct Throughput {
    config: ThroughputConfig,
    /// `(seconds, batches, samples)` after each of the last `window_size` batches.
    window: VecDeque<(f64, u64, u64)>,
}

impl Throughput {
    /// An empty window with these settings.
    pub fn new(config: ThroughputConfig) -> Self {
        let window = VecDeque::with_capacity(config.window_size.max(1));
        Self { config, window }
    }

    /// Records that `batches` batches of `samples` samples in all were done `seconds` after
    /// the start.
    pub fn update(&mut self, seconds: f64, batches: u64, samples: u64) {
        if self.window.len() == self.config.window_size.max(1) {
            self.window.pop_front();
        }
        self.window.push_back((seconds, batches, samples));
    }

    /// The metrics for `world_size` processes (each assumed to run as this one): the totals
    /// (`time`, `batches`, `samples`), and once the window is full the rates of this device
    /// (`device/batches_per_sec`, `device/samples_per_sec`, and as configured
    /// `device/items_per_sec`, `device/flops_per_sec`, `device/mfu`) and, with several
    /// processes, of all of them (the same names without `device/`).
    pub fn compute(&self, world_size: usize) -> BTreeMap<String, f64> {
        let mut metrics = BTreeMap::new();
        let Some(&(seconds, batches, samples)) = self.window.back() else {
            return metrics;
        };
        metrics.insert("time".into(), seconds);
        metrics.insert("batches".into(), batches as f64);
        metrics.insert("samples".into(), samples as f64);
        let (first_seconds, first_batches, first_samples) = self.window[0];
        let elapsed = seconds - first_seconds;
        if self.window.len() < self.config.window_size.max(2) || elapsed <= 0.0 {
            return metrics;
        }
        let per_second = |count: f64| count / elapsed;
        let sample_rate = per_second((samples - first_samples) as f64);
        let mut rates = vec![
            (
                "batches_per_sec",
                per_second((batches - first_batches) as f64),
            ),
            ("samples_per_sec", sample_rate),
        ];
        if let Some(items) = self.config.items_per_sample {
            rates.push(("items_per_sec", sample_rate * items));
        }
        if let Some(flops) = self.config.flops_per_sample {
            rates.push(("flops_per_sec", sample_rate * flops));
            if let Some(peak) = self.config.available_flops.filter(|p| *p > 0.0) {
                rates.push(("mfu", sample_rate * flops / peak));
            }
        }
        for (name, rate) in rates {
            metrics.insert(format!("device/{name}"), rate);
            if world_size > 1 {
                // The share of the peak is the same for all as for one.
                let all = if name == "mfu" {
                    rate
                } else {
                    rate * world_size as f64
                };
                metrics.insert(name.into(), all);
            }
        }
        metrics
    }
}

/// Logs the training throughput (`train/...`, see [`Throughput::compute`]) at the steps the
/// Trainer logs its step metrics. The clock is read at the end of each training batch without
/// waiting for the device, so on an accelerator that queues work the rates are right over a
/// window longer than its queue.
#[derive(Debug, Clone)]
pub struct ThroughputMonitor {
    throughput: Throughput,
    started: Option<Instant>,
    batches: u64,
    samples: u64,
    last_step: Option<u64>,
}

impl ThroughputMonitor {
    /// A monitor with these settings; `window_size` must be at least 2 (a rate needs two
    /// batch ends).
    pub fn new(config: ThroughputConfig) -> PlanResult<Self> {
        if config.window_size < 2 {
            return Err(FlagError::new(
                "--trainer.callbacks",
                config.window_size.to_string(),
                "ThroughputMonitor window_size must be an integer >= 2 (a rate needs two batch ends)",
            ));
        }
        Ok(Self {
            throughput: Throughput::new(config),
            started: None,
            batches: 0,
            samples: 0,
            last_step: None,
        })
    }
}

impl Callback for ThroughputMonitor {
    fn name(&self) -> &str {
        "ThroughputMonitor"
    }

    fn on_train_epoch_start(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        // The clock starts at the first batch's start; validation and the sanity check before
        // it do not count, and between epochs the window simply spans the gap.
        self.started.get_or_insert_with(Instant::now);
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        self.batches += 1;
        self.samples += ctx.state.batch_size as u64;
        let seconds = started.elapsed().as_secs_f64();
        self.throughput.update(seconds, self.batches, self.samples);
        let step = ctx.state.log_step();
        if !ctx.state.logs_step_metrics() || self.last_step == Some(step) {
            return Ok(());
        }
        self.last_step = Some(step);
        for (name, value) in self.throughput.compute(ctx.state.world_size) {
            ctx.log(format!("train/{name}"), value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(window_size: usize) -> ThroughputConfig {
        ThroughputConfig {
            window_size,
            items_per_sample: Some(128.0),
            flops_per_sample: Some(1e6),
            available_flops: Some(1e9),
        }
    }

    #[test]
    fn rates_are_those_of_a_known_workload_over_the_window() {
        // 10 batches of 32 samples a second for 2 s, then 20 a second.
        let mut t = Throughput::new(config(5));
        for i in 1..=20u64 {
            t.update(i as f64 * 0.1, i, i * 32);
        }
        let m = t.compute(1);
        assert_eq!(m["time"], 2.0);
        assert_eq!((m["batches"], m["samples"]), (20.0, 640.0));
        let close = |k: &str, v: f64| assert!((m[k] - v).abs() < 1e-9 * v, "{k}: {} vs {v}", m[k]);
        close("device/batches_per_sec", 10.0);
        close("device/samples_per_sec", 320.0);
        close("device/items_per_sec", 320.0 * 128.0);
        close("device/flops_per_sec", 320.0 * 1e6);
        close("device/mfu", 0.32);
        assert!(
            !m.contains_key("batches_per_sec"),
            "one process: device rates only"
        );
        for i in 21..=25u64 {
            t.update(2.0 + (i - 20) as f64 * 0.05, i, i * 32);
        }
        let m = t.compute(4);
        assert!((m["device/batches_per_sec"] - 20.0).abs() < 1e-9);
        assert!((m["batches_per_sec"] - 80.0).abs() < 1e-9);
        assert!((m["mfu"] - m["device/mfu"]).abs() < 1e-12);
    }

    #[test]
    fn before_the_window_fills_only_totals_are_reported() {
        let mut t = Throughput::new(config(5));
        assert!(t.compute(1).is_empty());
        for i in 1..=4u64 {
            t.update(i as f64, i, i * 8);
        }
        let m = t.compute(1);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["batches", "samples", "time"]);
        assert!(ThroughputMonitor::new(config(1)).is_err());
    }
}
