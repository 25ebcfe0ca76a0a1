//! Config sources merged into one tree: defaults, then `--config` files in order, then dotted
//! overrides (`--trainer.devices=2`, `--model.hidden=128`) in order. Later sources win.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml, Yaml};
use serde_json::Value;

use crate::error::{FlagError, PlanResult, list};

/// Top-level sections of an app's config.
pub const SECTIONS: [&str; 3] = ["trainer", "model", "data"];

/// Where config comes from, besides the app's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSources {
    /// `--config` files (YAML or TOML), in the order given.
    pub files: Vec<PathBuf>,
    /// Dotted overrides `(section.key, raw value)`, in the order given.
    pub overrides: Vec<(String, String)>,
}

/// A value typed on the command line: JSON when it parses as JSON (`2`, `[1,3]`, `true`,
/// `"3"`), otherwise the text itself (`cpu`, `1, 3`, `bf16-mixed`).
pub fn parse_override_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
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
