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

/// The callbacks config can name, with what each does (ember-core builds them).
pub const CALLBACK_NAMES: [(&str, &str); 8] = [
    (
        "ModelCheckpoint",
        "save checkpoints (monitor, mode, save_top_k, save_last, every_n_epochs, dirpath, filename)",
    ),
    (
        "EarlyStopping",
        "stop when a metric stops improving (monitor, mode, patience, min_delta, check_finite)",
    ),
    (
        "BackboneFinetuning",
        "freeze the model's backbone, then train it at a rising share of the rate (backbone, unfreeze_backbone_at_epoch, multiplier, backbone_initial_ratio_lr, should_align, train_bn)",
    ),
    (
        "EMAWeightAveraging",
        "validate, save and end fit with an exponential moving average of the weights (decay, update_every_n_steps, update_starting_at_step, update_starting_at_epoch)",
    ),
    (
        "StochasticWeightAveraging",
        "average the weights of the last epochs at a constant or annealed rate (swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy)",
    ),
    (
        "LearningRateMonitor",
        "log the learning rate (logging_interval: step or epoch)",
    ),
    (
        "DeviceStatsMonitor",
        "log the accelerator's device stats every log_every_n_steps",
    ),
    (
        "ProgressBar",
        "the progress bar (added by default; refresh_rate)",
    ),
];

/// What is allowed when a callback name is not known: the built-ins and `registered`.
pub fn unknown_callback<'a>(registered: impl IntoIterator<Item = &'a str>) -> String {
    let registered = list(registered);
    let registered = if registered.is_empty() {
        String::new()
    } else {
        format!("; registered: {registered}")
    };
    format!(
        "unknown callback; known: {}{registered} (others are added from Rust)",
        list(CALLBACK_NAMES.map(|(n, _)| n))
    )
}

/// A callback name as names are compared: its last path part (`a.b.EarlyStopping`), lowercase,
/// without `_` and `-`.
pub fn callback_key(name: &str) -> String {
    let last = name.rsplit(['.', ':']).next().unwrap_or_default();
    last.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

impl CallbackSpec {
    /// The callback of [`CALLBACK_NAMES`] this names, if any. Names match case-, `_`- and
    /// `-`-insensitively, and a Lightning class path
    /// (`lightning.pytorch.callbacks.EarlyStopping`) uses its last part.
    pub fn known_name(&self) -> Option<&'static str> {
        let key = callback_key(&self.class_path);
        let key = match key.as_str() {
            "lrmonitor" => "learningratemonitor",
            "tqdmprogressbar" => "progressbar",
            other => other,
        };
        CALLBACK_NAMES
            .iter()
            .map(|(name, _)| *name)
            .find(|name| name.to_ascii_lowercase() == key)
    }
}

/// The `callbacks` option: names of [`CALLBACK_NAMES`] or of callbacks an application
/// registered, or `{class_path, init_args}` tables. The names and settings are checked by
/// ember-core when it builds them (the CLI does so right after reading the flags, with the
/// registry's callbacks), still at plan time.
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
