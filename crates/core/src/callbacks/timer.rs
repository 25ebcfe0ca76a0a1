//! Timer: the time each stage has taken, and a training-time budget that stops `fit` when it is
//! spent (Lightning's `Timer`, which `--trainer.max_time` adds).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::{Callback, CallbackContext};
use crate::options::{duration_text, parse_duration};
use crate::stage::Stage;

/// When the budget is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimerInterval {
    /// After every training batch.
    #[default]
    Step,
    /// At the end of every training epoch.
    Epoch,
}

/// Timer's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimerConfig {
    /// Training time at most: `DD:HH:MM:SS` or a table of `days`, `hours`, `minutes`, `seconds`
    /// in a config; `None` only measures.
    #[serde(deserialize_with = "budget")]
    pub duration: Option<Duration>,
    /// When the budget is checked.
    pub interval: TimerInterval,
    /// Say on rank 0 when the budget stops the run.
    pub verbose: bool,
}

impl Default for TimerConfig {
    fn default() -> Self {
        Self {
            duration: None,
            interval: TimerInterval::Step,
            verbose: true,
        }
    }
}

fn budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => parse_duration(&v)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// Each stage's name in checkpoints (Lightning's), in [`Stage::ALL`]'s order.
const NAMES: [&str; 4] = ["train", "validate", "test", "predict"];

/// `stage`'s place in [`Stage::ALL`] (and [`NAMES`]).
fn index(stage: Stage) -> usize {
    Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0)
}

/// When a stage last started, and when it ended if it has.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: Instant,
    end: Option<Instant>,
}

/// Each stage's latest span, and the training time of the runs before a resume.
#[derive(Debug, Default)]
struct Times {
    spans: [Option<Span>; 4],
    trained_before: Duration,
}

impl Times {
    fn running(&self, stage: Stage) -> bool {
        self.spans[index(stage)].is_some_and(|span| span.end.is_none())
    }

    fn start(&mut self, stage: Stage) {
        let start = Instant::now();
        self.spans[index(stage)] = Some(Span { start, end: None });
    }

    /// Ends `stage`'s span if it is running.
    fn end(&mut self, stage: Stage) {
        if let Some(span) = self.spans[index(stage)]
            .as_mut()
            .filter(|s| s.end.is_none())
        {
            span.end = Some(Instant::now());
        }
    }

    fn elapsed(&self, stage: Stage) -> Duration {
        let before = match stage {
            Stage::Fit => self.trained_before,
            _ => Duration::ZERO,
        };
        let span = self.spans[index(stage)];
        before
            + span.map_or(Duration::ZERO, |s| {
                s.end.unwrap_or_else(Instant::now).duration_since(s.start)
            })
    }
}

/// What a [`Timer`] has measured, readable while and after the Trainer that holds the Timer
/// runs ([`Timer::clock`]).
#[derive(Debug, Clone, Default)]
pub struct TimerClock {
    times: Arc<Mutex<Times>>,
    duration: Option<Duration>,
}

impl TimerClock {
    fn times(&self) -> std::sync::MutexGuard<'_, Times> {
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time `stage` has taken (still running: until now). For `Stage::Fit` the training
    /// time, with that of the runs a resumed fit continues.
    pub fn time_elapsed(&self, stage: Stage) -> Duration {
        self.times().elapsed(stage)
    }

    /// The budget left to `stage` (zero once spent); `None` without a budget.
    pub fn time_remaining(&self, stage: Stage) -> Option<Duration> {
        let elapsed = self.time_elapsed(stage);
        self.duration.map(|d| d.saturating_sub(elapsed))
    }
}

/// Measures how long training, validation, testing and prediction take and, given a
/// duration, stops `fit` (as early stopping does: after the step, with a checkpoint) once the
/// training time reaches it. Its state (the time per stage) goes into checkpoints, so a resumed
/// fit counts the training time already spent; a resumed fit whose budget is spent stops
/// before its first step.
#[derive(Debug, Clone)]
pub struct Timer {
    config: TimerConfig,
    clock: TimerClock,
}

impl Timer {
    /// A timer with these settings.
    pub fn new(config: TimerConfig) -> Self {
        let clock = TimerClock {
            times: Arc::default(),
            duration: config.duration,
        };
        Self { config, clock }
    }

    /// A handle on what this timer measures, to read it after the Trainer took the timer.
    pub fn clock(&self) -> TimerClock {
        self.clock.clone()
    }

    /// Asks the loop to stop when the training time reached the budget.
    fn check(&self, ctx: &mut CallbackContext<'_>) {
        let Some(duration) = self.config.duration else {
            return;
        };
        let elapsed = self.clock.time_elapsed(Stage::Fit);
        if elapsed < duration {
            return;
        }
        if self.config.verbose && ctx.state.is_global_zero && !ctx.state.should_stop {
            eprintln!(
                "Time limit reached: {} of training. Stopping.",
                duration_text(elapsed)
            );
        }
        ctx.state.should_stop = true;
    }
}

impl Callback for Timer {
    fn name(&self) -> &str {
        "Timer"
    }

    fn state(&self) -> Option<Value> {
        let elapsed: serde_json::Map<String, Value> = (Stage::ALL.iter().zip(NAMES))
            .map(|(&stage, name)| {
                let seconds = self.clock.time_elapsed(stage).as_secs_f64();
                (name.to_owned(), json!(seconds))
            })
            .collect();
        Some(json!({ "time_elapsed": elapsed }))
    }

    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        let trained = state["time_elapsed"]["train"].as_f64().unwrap_or(0.0);
        let trained = Duration::try_from_secs_f64(trained).map_err(|_| {
            anyhow::anyhow!("Timer: a training time of {trained} s in the checkpoint")
        })?;
        self.clock.times().trained_before = trained;
        Ok(())
    }

    fn setup(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if let Some(stage @ (Stage::Test | Stage::Predict)) = ctx.state.stage {
            self.clock.times().start(stage);
        }
        Ok(())
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        // A resumed fit whose budget is spent stops before it trains.
        self.check(ctx);
        Ok(())
    }

    fn on_train_epoch_start(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let mut times = self.clock.times();
        if !times.running(Stage::Fit) {
            times.start(Stage::Fit);
        }
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.config.interval == TimerInterval::Step {
            self.check(ctx);
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.config.interval == TimerInterval::Epoch {
            self.check(ctx);
        }
        Ok(())
    }

    fn on_validation_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if !ctx.state.sanity_checking {
            self.clock.times().start(Stage::Validate);
        }
        Ok(())
    }

    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if !ctx.state.sanity_checking {
            self.clock.times().end(Stage::Validate);
        }
        Ok(())
    }

    fn on_test_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.clock.times().end(Stage::Test);
        Ok(())
    }

    fn on_fit_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.clock.times().end(Stage::Fit);
        Ok(())
    }

    fn teardown(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        // What is still running ends here (a failed fit; predict, which has no end hook).
        if let Some(stage) = ctx.state.stage {
            self.clock.times().end(stage);
        }
        Ok(())
    }
}
