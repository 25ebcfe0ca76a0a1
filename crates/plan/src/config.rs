//! Config sources merged into one tree: defaults, then `--config` files in order, then dotted
//! overrides (`--trainer.devices=2`, `--model.hidden=128`) in order. Later sources win.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml, Yaml};
use serde_json::Value;

use crate::error::{FlagError, PlanResult, list};

/// Top-level sections of an app's config.
pub const SECTIONS: [&str; 5] = ["trainer", "model", "data", "optimizer", "lr_scheduler"];

/// Where config comes from, besides the app's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSources {
    /// `--config` files (YAML or TOML), in the order given.
    pub files: Vec<PathBuf>,
    /// Dotted overrides `(section.key, raw value)`, in the order given.
    pub overrides: Vec<(String, String)>,
}

/// A value typed on the command line: JSON when it parses as JSON (`2`, `[1,3]`, `true`,
/// `"3"`); a YAML flow list or table when it is bracketed and parses as one
/// (`[LearningRateMonitor]`, `{class_path: EarlyStopping}`, as LightningCLI reads them);
/// otherwise the text itself (`cpu`, `1, 3`, `bf16-mixed`).
pub fn parse_override_value(raw: &str) -> Value {
    if let Ok(value) = serde_json::from_str(raw) {
        return value;
    }
    let trimmed = raw.trim();
    let bracketed = (trimmed.starts_with('[') && trimmed.ends_with(']'))
        || (trimmed.starts_with('{') && trimmed.ends_with('}'));
    bracketed
        .then(|| serde_yaml::from_str(trimmed).ok())
        .flatten()
        .unwrap_or_else(|| Value::String(raw.to_owned()))
}

fn file_provider(path: &Path) -> PlanResult<Figment> {
    let shown = path.display().to_string();
    if !path.is_file() {
        return Err(FlagError::new("--config", shown, "file not found"));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let figment = match ext.as_str() {
        "yaml" | "yml" => Figment::from(Yaml::file_exact(path)),
        "toml" => Figment::from(Toml::file_exact(path)),
        _ => {
            return Err(FlagError::new(
                "--config",
                shown,
                "unknown config format; use a .yaml, .yml or .toml file",
            ));
        }
    };
    // Parse each file on its own first, so an error names the file it is in.
    figment
        .extract::<Value>()
        .map_err(|e| FlagError::new("--config", &shown, format!("cannot read config: {e}")))?;
    Ok(figment)
}

/// Merges the sources over `defaults` and checks the top-level keys.
pub fn merge(defaults: &Value, sources: &ConfigSources) -> PlanResult<Value> {
    let mut figment = Figment::from(Serialized::defaults(defaults));
    for path in &sources.files {
        figment = figment.merge(file_provider(path)?);
    }
    for (key, raw) in &sources.overrides {
        let flag = format!("--{key}");
        let mut parts = key.split('.');
        let section = parts.next().unwrap_or_default();
        if !SECTIONS.contains(&section)
            || parts.clone().next().is_none()
            || key.split('.').any(str::is_empty)
        {
            return Err(FlagError::new(
                flag,
                raw,
                format!(
                    "expected --SECTION.KEY=VALUE with SECTION one of {}",
                    list(SECTIONS)
                ),
            ));
        }
        figment = figment.merge(Serialized::default(key, parse_override_value(raw)));
    }
    let merged: Value = figment
        .extract()
        .map_err(|e| FlagError::new("--config", "", format!("cannot merge config: {e}")))?;
    if let Value::Object(map) = &merged
        && let Some(key) = map.keys().find(|k| !SECTIONS.contains(&k.as_str()))
    {
        return Err(FlagError::new(
            "--config",
            key,
            format!("unknown top-level key; allowed: {}", list(SECTIONS)),
        ));
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::parse_override_value as parse;
    use serde_json::json;

    #[test]
    fn command_line_values_read_as_json_then_yaml_flow_then_text() {
        assert_eq!(parse("2"), json!(2));
        assert_eq!(parse("[1,3]"), json!([1, 3]));
        assert_eq!(parse("true"), json!(true));
        assert_eq!(parse("cpu"), json!("cpu"));
        assert_eq!(parse("1, 3"), json!("1, 3"));
        assert_eq!(
            parse("[LearningRateMonitor]"),
            json!(["LearningRateMonitor"])
        );
        assert_eq!(
            parse("[EarlyStopping, {class_path: ModelCheckpoint, init_args: {save_top_k: 2}}]"),
            json!(["EarlyStopping", {"class_path": "ModelCheckpoint", "init_args": {"save_top_k": 2}}])
        );
        assert_eq!(parse("{monitor: val_loss}"), json!({"monitor": "val_loss"}));
        // Not a well-formed flow collection: the text itself, for the option to judge.
        assert_eq!(parse("[a, {b"), json!("[a, {b"));
    }
}
