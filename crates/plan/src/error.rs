//! The one error type that planning produces: it names the flag, the value and what is allowed.

use std::fmt;

use serde_json::Value;

/// A rejected input: a CLI flag, a config key or an environment variable.
///
/// Its message always names the input (`--trainer.devices`, `SLURM_PROCID`, ...), the value
/// that was given, and what would have been accepted. The CLI prints it and exits with status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagError {
    /// The input as a user spells it, e.g. `--trainer.devices` or `EMBER_INVENTORY`.
    pub flag: String,
    /// The value that was given, rendered as the user wrote it.
    pub value: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl FlagError {
    /// A rejection of `value` for `flag`.
    pub fn new(
        flag: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            flag: flag.into(),
            value: value.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} value `{}`: {}",
            self.flag, self.value, self.message
        )
    }
}

impl std::error::Error for FlagError {}

/// Shorthand for the result of a planning step.
pub type PlanResult<T> = Result<T, FlagError>;

/// Formats names as a comma-separated list for error messages.
pub fn list<I, S>(names: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    names
        .into_iter()
        .map(|n| n.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A config value as the user would have typed it.
pub fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
