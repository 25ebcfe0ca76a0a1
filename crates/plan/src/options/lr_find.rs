//! The `lr_find` option: Lightning's learning-rate range test before `fit` (its `Tuner.lr_find`
//! settings), read from `true` or a table.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::settings;
use super::values::Kind;

/// How the sweep's rate rises from `min_lr` to `max_lr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepMode {
    /// By a constant factor per step.
    #[default]
    Exponential,
    /// By a constant amount per step.
    Linear,
}

/// The learning-rate finder's settings (Lightning's names and defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LrFind {
    /// The first rate tried.
    pub min_lr: f64,
    /// The last rate tried.
    pub max_lr: f64,
    /// Optimizer steps of the sweep (one rate each).
    pub num_training: u64,
    /// How the rate rises.
    pub mode: SweepMode,
    /// Stop when the smoothed loss exceeds this many times the best one; `null`: never.
    pub early_stop_threshold: Option<f64>,
    /// The key under `model` in the hyperparameters that takes the suggestion; empty: `lr`,
    /// else `learning_rate`.
    pub attr_name: String,
}

impl Default for LrFind {
    fn default() -> Self {
        Self {
            min_lr: 1e-8,
            max_lr: 1.0,
            num_training: 100,
            mode: SweepMode::Exponential,
            early_stop_threshold: Some(4.0),
            attr_name: String::new(),
        }
    }
}

impl LrFind {
    /// Refuses settings no sweep can run with.
    fn checked(self) -> Result<Self, String> {
        let rates_ok = self.min_lr > 0.0 && self.max_lr > self.min_lr && self.max_lr.is_finite();
        if !rates_ok {
            return Err(format!(
                "0 < min_lr < max_lr (got min_lr {} and max_lr {})",
                self.min_lr, self.max_lr
            ));
        }
        if self.num_training < 2 {
            return Err("num_training of at least 2".into());
        }
        if self
            .early_stop_threshold
            .is_some_and(|t| t.is_nan() || t <= 0.0)
        {
            return Err("an early_stop_threshold > 0, or null".into());
        }
        Ok(self)
    }
}

/// `true` (Lightning's settings), a table of [`LrFind`]'s, or `false`/null for none.
pub struct LrFindChoice;

impl Kind for LrFindChoice {
    type Value = Option<LrFind>;

    fn parse(value: &Value) -> Result<Option<LrFind>, String> {
        let allowed = "true, false, or a table of min_lr, max_lr, num_training, mode (exponential or linear), early_stop_threshold, attr_name";
        settings::parse(value, allowed, LrFind::checked)
    }

    fn write(value: &Option<LrFind>) -> Value {
        settings::write(value)
    }
}
