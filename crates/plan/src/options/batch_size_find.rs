//! The `batch_size_find` option: Lightning's batch-size scaling before `fit` (its
//! `Tuner.scale_batch_size` settings), read from `true` or a table.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::settings;
use super::values::Kind;

/// How the sizes tried grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleMode {
    /// Double until a size fails; keep the last that fitted.
    #[default]
    Power,
    /// Double until a size fails, then halve the gap between the last fit and the failure.
    Binsearch,
}

/// The batch-size finder's settings (Lightning's names and defaults, and the memory budget).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchSizeFind {
    /// How the sizes grow.
    pub mode: ScaleMode,
    /// The first size tried.
    pub init_val: u64,
    /// Sizes tried at most.
    pub max_trials: u64,
    /// Optimizer steps each size runs.
    pub steps_per_trial: u64,
    /// The key of the batch size under `data` (else under `model`) in the hyperparameters.
    pub batch_arg_name: String,
    /// The share of the memory available when the search starts that a trial's process may
    /// use at its peak (its resident set): larger sizes count as not fitting.
    pub memory_share: f64,
}

impl Default for BatchSizeFind {
    fn default() -> Self {
        Self {
            mode: ScaleMode::Power,
            init_val: 2,
            max_trials: 25,
            steps_per_trial: 3,
            batch_arg_name: "batch_size".into(),
            memory_share: 0.9,
        }
    }
}

impl BatchSizeFind {
    /// Refuses settings no search can run with.
    fn checked(self) -> Result<Self, String> {
        if self.init_val == 0 || self.max_trials == 0 || self.steps_per_trial == 0 {
            return Err("init_val, max_trials and steps_per_trial of at least 1".into());
        }
        if !(self.memory_share > 0.0 && self.memory_share <= 1.0) {
            return Err(format!(
                "a memory_share in (0, 1] (got {})",
                self.memory_share
            ));
        }
        Ok(self)
    }
}

/// `true` (Lightning's settings), a table of [`BatchSizeFind`]'s, or `false`/null for none.
pub struct BatchSizeFindChoice;

impl Kind for BatchSizeFindChoice {
    type Value = Option<BatchSizeFind>;

    fn parse(value: &Value) -> Result<Option<BatchSizeFind>, String> {
        let allowed = "true, false, or a table of mode (power or binsearch), init_val, max_trials, steps_per_trial, batch_arg_name, memory_share";
        settings::parse(value, allowed, BatchSizeFind::checked)
    }

    fn write(value: &Option<BatchSizeFind>) -> Value {
        settings::write(value)
    }
}
