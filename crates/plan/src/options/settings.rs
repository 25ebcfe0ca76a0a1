//! Options that are off, on with their defaults, or a table of settings (`lr_find`,
//! `batch_size_find`): how they read and write a config value.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `false`/null (off), `true` (the defaults) or a table of `T`'s settings, which `check` refuses
/// or passes; `allowed` says what is allowed when the value is none of these.
pub(super) fn parse<T: Default + DeserializeOwned>(
    value: &Value,
    allowed: &str,
    check: impl FnOnce(T) -> Result<T, String>,
) -> Result<Option<T>, String> {
    match value {
        Value::Null | Value::Bool(false) => Ok(None),
        Value::Bool(true) => Ok(Some(T::default())),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(Some(T::default())),
            "false" | "null" | "none" => Ok(None),
            _ => Err(allowed.into()),
        },
        Value::Object(_) => {
            let settings: T =
                serde_json::from_value(value.clone()).map_err(|e| format!("{allowed}: {e}"))?;
            check(settings).map(Some)
        }
        _ => Err(allowed.into()),
    }
}

/// What [`parse`] reads back: `false`, `true` for the defaults, else the table.
pub(super) fn write<T: Default + PartialEq + Serialize>(value: &Option<T>) -> Value {
    match value {
        None => Value::Bool(false),
        Some(settings) if *settings == T::default() => Value::Bool(true),
        Some(settings) => serde_json::to_value(settings).unwrap_or(Value::Bool(true)),
    }
}
