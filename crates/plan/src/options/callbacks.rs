//! The `callbacks` option: callbacks named in config, by name or as `{class_path, init_args}`
//! tables (ember-core builds them).

use serde_json::{Value, json};

use super::values::Kind;
use crate::error::list;

/// A callback as a config file names it: `class_path` and its `init_args`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSpec {
    /// The callback's name, e.g. `EarlyStopping` (case and `_` do not matter).
    pub class_path: String,
    /// Its settings, a table.
    pub init_args: Value,
}

/// What is allowed when a callback name is not known: the registered names.
pub fn unknown_callback<'a>(registered: impl IntoIterator<Item = &'a str>) -> String {
    format!(
        "unknown callback; known: {} (others are added from Rust)",
        list(registered)
    )
}

/// A callback name as names are compared: its last path part (`a.b.EarlyStopping`), lowercase,
/// without `_` and `-`; Lightning's other names for two built-ins (`LRMonitor`,
/// `TQDMProgressBar`) compare as theirs.
pub fn callback_key(name: &str) -> String {
    let last = name.rsplit(['.', ':']).next().unwrap_or_default();
    let key: String = last
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    match key.as_str() {
        "lrmonitor" => "learningratemonitor".to_owned(),
        "tqdmprogressbar" => "progressbar".to_owned(),
        _ => key,
    }
}

/// The `callbacks` option: names of registered callbacks (ember's own and an application's),
/// or `{class_path, init_args}` tables. The names and settings are checked by ember-core when
/// it builds them (the CLI does so right after reading the flags, with the registry's
/// callbacks), still at plan time.
pub struct Callbacks;

impl Kind for Callbacks {
    type Value = Vec<CallbackSpec>;

    fn parse(value: &Value) -> Result<Vec<CallbackSpec>, String> {
        let allowed = "a list whose entries are callback names or {class_path, init_args} tables";
        let items = match value {
            Value::Null => return Ok(Vec::new()),
            Value::Array(items) => items.as_slice(),
            Value::String(_) | Value::Object(_) => std::slice::from_ref(value),
            _ => return Err(allowed.into()),
        };
        let specs = items
            .iter()
            .map(|item| match item {
                Value::String(name) if !name.trim().is_empty() => Ok(CallbackSpec {
                    class_path: name.trim().to_owned(),
                    init_args: json!({}),
                }),
                Value::Object(table) => {
                    let class_path = table
                        .get("class_path")
                        .and_then(Value::as_str)
                        .ok_or_else(|| allowed.to_owned())?;
                    if let Some(extra) = table
                        .keys()
                        .find(|k| *k != "class_path" && *k != "init_args")
                    {
                        return Err(format!(
                            "unknown key `{extra}` in a callback entry; allowed: class_path, init_args"
                        ));
                    }
                    Ok(CallbackSpec {
                        class_path: class_path.to_owned(),
                        init_args: table.get("init_args").cloned().unwrap_or_else(|| json!({})),
                    })
                }
                _ => Err(allowed.into()),
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(specs)
    }

    fn write(value: &Vec<CallbackSpec>) -> Value {
        json!(
            value
                .iter()
                .map(|c| json!({"class_path": c.class_path, "init_args": c.init_args}))
                .collect::<Vec<_>>()
        )
    }
}
