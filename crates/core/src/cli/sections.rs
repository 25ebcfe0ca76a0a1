//! The `model` and `data` sections of the command line: `--model.KEY=VALUE` and
//! `--data.KEY=VALUE` taken out of the arguments, and a section read from the merged config.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{FlagError, list, render};

/// Arguments for clap, and the `(section.key, value)` overrides taken out of them.
type SplitArgs = (Vec<String>, Vec<(String, String)>);

/// Takes `--model.K=V` / `--data.K=V` (or `--model.K V`) out of the arguments, in order.
pub(super) fn split_section_overrides(args: Vec<String>) -> Result<SplitArgs, FlagError> {
    let mut rest = Vec::with_capacity(args.len());
    let mut overrides = Vec::new();
    let mut iter = args.into_iter();
    while let Some(arg) = iter.next() {
        let Some(key) = ["--model.", "--data."]
            .iter()
            .find(|p| arg.starts_with(*p))
            .map(|_| arg.trim_start_matches("--").to_owned())
        else {
            rest.push(arg);
            continue;
        };
        let (key, value) = match key.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => {
                let value = iter.next().ok_or_else(|| {
                    FlagError::new(format!("--{key}"), "", "expected a value (--KEY=VALUE)")
                })?;
                (key, value)
            }
        };
        overrides.push((key, value));
    }
    Ok((rest, overrides))
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
