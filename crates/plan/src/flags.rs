//! Trainer flags as the user gives them (`--trainer.KEY=VALUE`, config files, or Rust).

use serde_json::{Map, Value, json};

use crate::devices::DevicesFlag;
use crate::error::{FlagError, PlanResult, list, render};
use crate::init_args::{CHOOSING, InitArgs};
use crate::options::{
    Flag, FlagOrNull, Kind, OptionInfo, TrainerOptions, help_lines, is_option_key, options_table,
};

options_table! {
    /// Unresolved trainer flags: what was asked for, before any hardware or environment is
    /// known — the keys the connector reads, then the loop options.
    struct TrainerFlags {
        /// The loop options (epochs, limits, callbacks, loggers ...).
        options: TrainerOptions = TrainerOptions::default(),
        /// The `init_args` given with the plugins named in `strategy`, `precision`,
        /// `cluster_environment` and `plugins` (`{class_path, init_args}` tables).
        init_args: InitArgs = InitArgs::default(),
    }
    infos PLAN_KEYS;
    setters with;
    /// `auto`, `gpu`, or a registered accelerator name.
    accelerator: String = "auto".into(), Name,
        "accelerator name: auto, gpu, or a registered name";
    /// `auto` or a registered strategy name (case-insensitive).
    strategy: String = "auto".into(), Name,
        "strategy name: auto or a registered name";
    /// Devices, in any accepted form.
    devices: DevicesFlag = DevicesFlag::Auto, Devices,
        "auto, a count, -1 for all, or a list of ids like [0,2] or \"0, 2\"";
    /// Number of nodes as given (validated by the connector).
    num_nodes: i64 = 1, NodeCount,
        "number of nodes, an integer > 0";
    /// Precision name as given (validated by the connector).
    precision: String = "32-true".into(), Name,
        "32-true, 64-true, 16-true, bf16-true, 16-mixed or bf16-mixed";
    /// `auto` or a cluster environment name.
    cluster_environment: String = "auto".into(), Name,
        "auto (detect), local, torchelastic, slurm, lsf, mpi, kubeflow or a registered one";
    /// Registered plugins by name (`--trainer.plugins`).
    plugins: Vec<String> = Vec::new(), PluginNames,
        "registered plugins by name: a precision plugin, a checkpoint IO, a cluster environment, a process group backend (mpi, or an accelerator's own, e.g. nccl)";
    /// Require bitwise reproducible kernels, or refuse at plan time (`--trainer.deterministic`).
    deterministic: bool = false, Flag,
        "require bitwise reproducible kernels, or fail if the accelerator has none";
    /// Recompute the activations of the blocks a model runs through `ember::nn::recompute` in
    /// the backward pass instead of keeping them (`--trainer.activation_checkpointing`).
    activation_checkpointing: bool = false, Flag,
        "recompute the activations of the model's checkpointed blocks in the backward pass instead of keeping them (less memory, more time)";
    /// Flush subnormal floats on host threads; `None`: the accelerator's default
    /// (`--trainer.flush_denormal`).
    flush_denormal: Option<bool> = None, FlagOrNull,
        "flush subnormal floats to zero on host threads (as torch.set_flush_denormal)",
        shown "true on cpu, else false";
}

/// Every `trainer` key with its `--help` line: the plan keys, then the loop options.
pub fn trainer_keys() -> impl Iterator<Item = (&'static str, String)> {
    let defaults = TrainerFlags::default().to_value();
    let plan = PLAN_KEYS
        .iter()
        .map(move |k| (k.key, k.help_line(&defaults)));
    plan.chain(help_lines())
}

impl TrainerFlags {
    /// Sets the number of epochs.
    pub fn max_epochs(mut self, epochs: u64) -> Self {
        self.options.max_epochs = Some(epochs);
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = Some(seed);
        self
    }

    /// The `trainer` section as a config file holds it (what `--print-config` prints): every
    /// key, and a plugin given `init_args` as its `{class_path, init_args}` table.
    pub fn to_config(&self) -> Map<String, Value> {
        self.init_args.with_tables(self.to_value())
    }

    /// Reads the `trainer` section of a merged config; unknown keys are errors.
    pub fn from_value(section: &Value) -> PlanResult<Self> {
        let empty = Map::new();
        let map = match section {
            Value::Object(m) => m,
            Value::Null => &empty,
            other => {
                return Err(FlagError::new(
                    "--trainer",
                    render(other),
                    "expected a table of trainer options",
                ));
            }
        };
        let mut flags = Self::default();
        for (key, value) in map {
            if CHOOSING.contains(&key.as_str()) {
                let names = flags.init_args.take_all(key, value)?;
                flags.set(key, &names)?;
            } else if PLAN_KEYS.iter().any(|k| k.key == key) {
                flags.set(key, value)?;
            } else if is_option_key(key) {
                flags.options.set(key, value)?;
            } else {
                return Err(FlagError::new(
                    format!("--trainer.{key}"),
                    render(value),
                    format!(
                        "unknown trainer option; known: {}",
                        list(trainer_keys().map(|(k, _)| k))
                    ),
                ));
            }
        }
        flags.options.check()?;
        Ok(flags)
    }
}

/// A name: strings as they are, numbers and booleans as their text.
struct Name;

impl Kind for Name {
    type Value = String;

    fn parse(value: &Value) -> Result<String, String> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Number(_) | Value::Bool(_) => Ok(value.to_string()),
            _ => Err("expected a single name".into()),
        }
    }

    fn write(value: &String) -> Value {
        json!(value)
    }
}

/// `devices`: `auto`, a count, `-1`, or a list of ids.
struct Devices;

impl Kind for Devices {
    type Value = DevicesFlag;

    fn parse(value: &Value) -> Result<DevicesFlag, String> {
        DevicesFlag::from_value(value)
    }

    fn write(value: &DevicesFlag) -> Value {
        match value {
            DevicesFlag::Auto => json!("auto"),
            DevicesFlag::Count(n) => json!(n),
            DevicesFlag::Ids(ids) => json!(ids),
        }
    }
}

/// `num_nodes`: an integer (the connector refuses one below 1).
struct NodeCount;

impl Kind for NodeCount {
    type Value = i64;

    fn parse(value: &Value) -> Result<i64, String> {
        let parsed = match value {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        parsed.ok_or_else(|| "num_nodes must be a positive integer".into())
    }

    fn write(value: &i64) -> Value {
        json!(value)
    }
}

/// `plugins`: `[a, b]`, one name, or Lightning's `{class_path, init_args}` tables (whose
/// arguments [`InitArgs`] keeps).
struct PluginNames;

impl Kind for PluginNames {
    type Value = Vec<String>;

    fn parse(value: &Value) -> Result<Vec<String>, String> {
        plugin_names(value)
    }

    fn write(value: &Vec<String>) -> Value {
        json!(value)
    }
}

/// The plugin names of `value`, or what is allowed.
fn plugin_names(value: &Value) -> Result<Vec<String>, String> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items.clone(),
        // `--trainer.plugins=[a, b]` on the command line.
        Value::String(s) if s.trim().starts_with('[') && s.trim().ends_with(']') => {
            let inner = &s.trim()[1..s.trim().len() - 1];
            inner
                .split(',')
                .map(|n| Value::String(n.trim().trim_matches(['"', '\'']).to_owned()))
                .filter(|n| n.as_str() != Some(""))
                .collect()
        }
        other => vec![other.clone()],
    };
    let entry = |item: &Value| -> Result<String, String> {
        let name = match item {
            Value::String(s) => s.trim(),
            // A table's arguments were taken before (`InitArgs::take_all`).
            Value::Object(table) => table
                .get("class_path")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim(),
            _ => "",
        };
        if name.is_empty() {
            return Err(format!(
                "a list of plugin names, or {{class_path: NAME}} tables (not {})",
                render(item)
            ));
        }
        Ok(name.to_owned())
    };
    items.iter().map(entry).collect()
}
