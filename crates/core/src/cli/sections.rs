//! The `model` and `data` sections of the command line: `--model.KEY=VALUE` and
//! `--data.KEY=VALUE` taken out of the arguments, and a section read from the merged config.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{FlagError, list, render};

/// Arguments for clap, and the `(section.key, value)` overrides taken out of them.
type SplitArgs = (Vec<String>, Vec<(String, String)>);

/// The sections whose keys the command line takes as `--SECTION.KEY=VALUE`, besides `trainer`.
const SECTIONS: [&str; 4] = ["model", "data", "optimizer", "lr_scheduler"];

/// The sections also given whole, by class (`--optimizer=AdamW`, or a `{class_path,
/// init_args}` table).
const BY_CLASS: [&str; 2] = ["optimizer", "lr_scheduler"];

/// Takes `--model.K=V`, `--data.K=V`, `--optimizer[.K]=V` and `--lr_scheduler[.K]=V` (or with
/// the value as the next argument) out of the arguments, in order. A whole `--optimizer=V`
/// becomes `optimizer.class_path`, or, for a table, one override per key of it.
pub(super) fn split_section_overrides(args: Vec<String>) -> Result<SplitArgs, FlagError> {
    let mut rest = Vec::with_capacity(args.len());
    let mut overrides = Vec::new();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        let flag = arg.split_once('=').map_or(arg.as_str(), |(flag, _)| flag);
        let Some(key) = flag.strip_prefix("--").filter(|key| {
            let section = key.split('.').next().unwrap_or_default();
            SECTIONS.contains(&section) && (key.contains('.') || BY_CLASS.contains(key))
        }) else {
            rest.push(arg);
            continue;
        };
        let key = key.to_owned();
        let value = match arg.split_once('=') {
            Some((_, v)) => v.to_owned(),
            None => iter.next().ok_or_else(|| {
                FlagError::new(format!("--{key}"), "", "expected a value (--KEY=VALUE)")
            })?,
        };
        match key.contains('.') {
            true => overrides.push((key, value)),
            false => overrides.extend(whole_section(&key, &value)?),
        }
    }
    Ok((rest, overrides))
}

/// The overrides a whole `--SECTION=VALUE` stands for: a class name, or a table's keys.
fn whole_section(section: &str, value: &str) -> Result<Vec<(String, String)>, FlagError> {
    match crate::config::parse_override_value(value) {
        Value::Object(table) => Ok(table
            .iter()
            .map(|(key, v)| (format!("{section}.{key}"), v.to_string()))
            .collect()),
        Value::String(class) => Ok(vec![(format!("{section}.class_path"), class)]),
        other => Err(FlagError::new(
            format!("--{section}"),
            render(&other),
            "a class name or a {class_path, init_args} table",
        )),
    }
}

/// Reads a user section, refusing top-level keys its defaults do not have.
pub(super) fn section<T: DeserializeOwned>(
    name: &str,
    merged: &Value,
    defaults: &Value,
) -> Result<T, FlagError> {
    let value = &merged[name];
    if let (Some(given), Some(known)) = (value.as_object(), defaults[name].as_object())
        && let Some((key, v)) = given.iter().find(|(k, _)| !known.contains_key(*k))
    {
        return Err(FlagError::new(
            format!("--{name}.{key}"),
            render(v),
            format!("unknown {name} option; known: {}", list(known.keys())),
        ));
    }
    serde_json::from_value(value.clone()).map_err(|e| {
        // Name the first option whose value alone, over the defaults, is unreadable.
        let culprit = value
            .as_object()
            .into_iter()
            .flatten()
            .find_map(|(key, v)| {
                let mut one = defaults[name].clone();
                one[key] = v.clone();
                serde_json::from_value::<T>(one).err().map(|e| (key, v, e))
            });
        match culprit {
            Some((key, v, e)) => {
                FlagError::new(format!("--{name}.{key}"), render(v), e.to_string())
            }
            None => FlagError::new(
                format!("--{name}"),
                render(value),
                format!("invalid {name} config: {e}"),
            ),
        }
    })
}
