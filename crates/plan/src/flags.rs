//! Trainer flags as the user gives them (`--trainer.KEY=VALUE`, config files, or Rust).

use serde_json::{Map, Value, json};

use crate::devices::DevicesFlag;
use crate::error::{FlagError, PlanResult, list, render};
use crate::options::{Flag, FlagOrNull, Kind, TrainerOptions, help_lines, is_option_key};

/// The trainer keys the connector reads, with a line of help each.
pub const PLAN_KEYS: [(&str, &str); 9] = [
    (
        "accelerator",
        "accelerator name: auto, gpu, or a registered name [default: auto]",
    ),
    (
        "strategy",
        "strategy name: auto or a registered name [default: auto]",
    ),
    (
        "devices",
        "auto, a count, -1 for all, or a list of ids like [0,2] or \"0, 2\" [default: auto]",
    ),
    ("num_nodes", "number of nodes, an integer > 0 [default: 1]"),
    (
        "precision",
        "32-true, 64-true, 16-true, bf16-true, 16-mixed or bf16-mixed [default: 32-true]",
    ),
    (
        "cluster_environment",
        "auto (detect), local, torchelastic, slurm, lsf, mpi, kubeflow or a registered one [default: auto]",
    ),
    (
        "plugins",
        "registered plugins by name: a precision plugin, a checkpoint IO, a cluster environment, a process group backend (mpi, or an accelerator's own, e.g. nccl) [default: []]",
    ),
    (
        "deterministic",
        "require bitwise reproducible kernels, or fail if the accelerator has none [default: false]",
    ),
    (
        "flush_denormal",
        "flush subnormal floats to zero on host threads (as torch.set_flush_denormal) [default: true on cpu, else false]",
    ),
];

/// Every `trainer` key with its `--help` line: the plan keys, then the loop options.
pub fn trainer_keys() -> impl Iterator<Item = (&'static str, String)> {
    let plan = PLAN_KEYS
        .iter()
        .map(|(key, help)| (*key, (*help).to_owned()));
    plan.chain(help_lines())
}

/// Unresolved trainer flags: what was asked for, before any hardware or environment is known.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerFlags {
    /// `auto`, `gpu`, or a registered accelerator name.
    pub accelerator: String,
    /// `auto` or a registered strategy name (case-insensitive).
    pub strategy: String,
    /// Devices, in any accepted form.
    pub devices: DevicesFlag,
    /// Number of nodes as given (validated by the connector).
    pub num_nodes: i64,
    /// Precision name as given (validated by the connector).
    pub precision: String,
    /// `auto` or a cluster environment name.
    pub cluster_environment: String,
    /// Registered plugins by name (`--trainer.plugins`).
    pub plugins: Vec<String>,
    /// Require bitwise reproducible kernels, or refuse at plan time (`--trainer.deterministic`).
    pub deterministic: bool,
    /// Flush subnormal floats on host threads; `None`: the accelerator's default
    /// (`--trainer.flush_denormal`).
    pub flush_denormal: Option<bool>,
    /// The loop options (epochs, limits, callbacks, loggers ...).
    pub options: TrainerOptions,
}

impl Default for TrainerFlags {
    fn default() -> Self {
        Self {
            accelerator: "auto".into(),
            strategy: "auto".into(),
            devices: DevicesFlag::Auto,
            num_nodes: 1,
            precision: "32-true".into(),
            cluster_environment: "auto".into(),
            plugins: Vec::new(),
            deterministic: false,
            flush_denormal: None,
            options: TrainerOptions::default(),
        }
    }
}

impl TrainerFlags {
    /// Sets the accelerator name.
    pub fn accelerator(mut self, name: &str) -> Self {
        self.accelerator = name.into();
        self
    }
    /// Sets the strategy name.
    pub fn strategy(mut self, name: &str) -> Self {
        self.strategy = name.into();
        self
    }
    /// Sets the devices.
    pub fn devices(mut self, devices: DevicesFlag) -> Self {
        self.devices = devices;
        self
    }
    /// Sets the number of nodes.
    pub fn num_nodes(mut self, n: i64) -> Self {
        self.num_nodes = n;
        self
    }
    /// Sets the precision name.
    pub fn precision(mut self, name: &str) -> Self {
        self.precision = name.into();
        self
    }
    /// Chooses a cluster environment instead of detecting one.
    pub fn cluster_environment(mut self, name: &str) -> Self {
        self.cluster_environment = name.into();
        self
    }

    /// Sets `plugins`: registered plugins by name.
    pub fn plugins(mut self, names: &[&str]) -> Self {
        self.plugins = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Requires bitwise reproducible kernels.
    pub fn deterministic(mut self, on: bool) -> Self {
        self.deterministic = on;
        self
    }

    /// Sets whether host threads flush subnormal floats (`None`: the accelerator's default).
    pub fn flush_denormal(mut self, on: Option<bool>) -> Self {
        self.flush_denormal = on;
        self
    }

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

    /// The flags as a config tree (the `trainer` section of a config file).
    pub fn to_value(&self) -> Value {
        let devices = match &self.devices {
            DevicesFlag::Auto => json!("auto"),
            DevicesFlag::Count(n) => json!(n),
            DevicesFlag::Ids(ids) => json!(ids),
        };
        let mut value = json!({
            "accelerator": self.accelerator,
            "strategy": self.strategy,
            "devices": devices,
            "num_nodes": self.num_nodes,
            "precision": self.precision,
            "cluster_environment": self.cluster_environment,
            "plugins": self.plugins,
            "deterministic": Flag::write(&self.deterministic),
            "flush_denormal": FlagOrNull::write(&self.flush_denormal),
        });
        if let Value::Object(map) = &mut value {
            map.extend(self.options.to_value());
        }
        value
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
            let flag = format!("--trainer.{key}");
            match key.as_str() {
                "accelerator" => flags.accelerator = text(&flag, value)?,
                "strategy" => flags.strategy = text(&flag, value)?,
                "precision" => flags.precision = text(&flag, value)?,
                "cluster_environment" => flags.cluster_environment = text(&flag, value)?,
                "plugins" => flags.plugins = plugin_names(&flag, value)?,
                "deterministic" => flags.deterministic = parse::<Flag>(&flag, value)?,
                "flush_denormal" => flags.flush_denormal = parse::<FlagOrNull>(&flag, value)?,
                "devices" => {
                    flags.devices = DevicesFlag::from_value(value)
                        .map_err(|m| FlagError::new(&flag, render(value), m))?;
                }
                "num_nodes" => {
                    flags.num_nodes = integer(&flag, value, "num_nodes must be a positive integer")?
                }
                _ if is_option_key(key) => flags.options.set(key, value)?,
                _ => {
                    return Err(FlagError::new(
                        flag,
                        render(value),
                        format!(
                            "unknown trainer option; known: {}",
                            list(trainer_keys().map(|(k, _)| k))
                        ),
                    ));
                }
            }
        }
        flags.options.check()?;
        Ok(flags)
    }
}

/// A value of kind `K`, or an error naming the flag, the value and what `K` allows.
fn parse<K: Kind>(flag: &str, value: &Value) -> PlanResult<K::Value> {
    K::parse(value).map_err(|allowed| FlagError::new(flag, render(value), allowed))
}

/// A scalar option: strings as they are, numbers and booleans as their text.
fn text(flag: &str, value: &Value) -> PlanResult<String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(_) | Value::Bool(_) => Ok(value.to_string()),
        other => Err(FlagError::new(
            flag,
            render(other),
            "expected a single name",
        )),
    }
}

/// `[a, b]`, one name, or Lightning's `{class_path, init_args}` tables (plugins made by name
/// take no arguments).
fn plugin_names(flag: &str, value: &Value) -> PlanResult<Vec<String>> {
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
    let entry = |item: &Value| -> PlanResult<String> {
        let name = match item {
            Value::String(s) => s.trim(),
            Value::Object(table) => {
                let no_args = match table.get("init_args") {
                    None | Some(Value::Null) => true,
                    Some(Value::Object(args)) => args.is_empty(),
                    Some(_) => false,
                };
                if !no_args {
                    return Err(FlagError::new(
                        flag,
                        render(item),
                        "plugins chosen by name take no init_args; build one with arguments in Rust and pass it to the Trainer's builder",
                    ));
                }
                table
                    .get("class_path")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
            }
            _ => "",
        };
        if name.is_empty() {
            return Err(FlagError::new(
                flag,
                render(item),
                "a list of plugin names, or {class_path: NAME} tables",
            ));
        }
        Ok(name.to_owned())
    };
    items.iter().map(entry).collect()
}

fn integer(flag: &str, value: &Value, allowed: &str) -> PlanResult<i64> {
    let parsed = match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| FlagError::new(flag, render(value), allowed))
}
