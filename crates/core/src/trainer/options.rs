//! The Trainer's loop options (`--trainer.max_steps=100`, `--trainer.callbacks=[...]`, ...).
//!
//! They share the `trainer` config section with the plan keys of [`crate::flags`]; each is
//! parsed on its own so that a rejection names its flag, its value and what is allowed.

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{FlagError, PlanResult};
use crate::flags::render;

/// The loop options, with a line of help each (shown by `--help`).
pub const OPTION_KEYS: [(&str, &str); 27] = [
    (
        "max_epochs",
        "stop after this many epochs [default: the app's, else 1000]",
    ),
    (
        "min_epochs",
        "train at least this many epochs before early stopping may stop [default: 0]",
    ),
    (
        "max_steps",
        "stop after this many optimizer steps; -1 for no limit [default: -1]",
    ),
    (
        "limit_train_batches",
        "batches per training epoch: a count, or a fraction in [0, 1] [default: 1.0]",
    ),
    (
        "limit_val_batches",
        "batches per validation pass: a count or a fraction [default: 1.0]",
    ),
    (
        "limit_test_batches",
        "batches per test pass: a count or a fraction [default: 1.0]",
    ),
    (
        "limit_predict_batches",
        "batches to predict: a count or a fraction [default: 1.0]",
    ),
    (
        "val_check_interval",
        "validate every N training batches, or every fraction of an epoch [default: 1.0]",
    ),
    (
        "check_val_every_n_epoch",
        "validate every N epochs; null to validate only by val_check_interval batches [default: 1]",
    ),
    (
        "num_sanity_val_steps",
        "validation batches run before training; -1 for all [default: 2]",
    ),
    (
        "fast_dev_run",
        "true or N: run N batches of each loop once, with no logging or checkpoints [default: false]",
    ),
    (
        "overfit_batches",
        "train and validate on this many (or this fraction of) training batches, unshuffled [default: 0]",
    ),
    (
        "seed",
        "seed for weights, shuffling and dropout; null draws one [default: the app's]",
    ),
    (
        "deterministic",
        "require bitwise reproducible kernels, or fail if the backend has none [default: false]",
    ),
    (
        "accumulate_grad_batches",
        "batches whose gradients are summed per optimizer step [default: 1]",
    ),
    (
        "gradient_clip_val",
        "clip gradients at this value; null for none [default: null]",
    ),
    (
        "gradient_clip_algorithm",
        "norm (global L2 norm) or value (each element) [default: norm]",
    ),
    (
        "log_every_n_steps",
        "write step metrics every N optimizer steps [default: 50]",
    ),
    (
        "enable_progress_bar",
        "show a progress bar on a terminal [default: true]",
    ),
    (
        "enable_checkpointing",
        "add a ModelCheckpoint when callbacks has none [default: true]",
    ),
    (
        "default_root_dir",
        "where logs and checkpoints go [default: the working directory]",
    ),
    (
        "logger",
        "true (csv), false, or a list of csv, tensorboard [default: true]",
    ),
    (
        "callbacks",
        "a list of callbacks: names, or {class_path, init_args} tables [default: []]",
    ),
    (
        "ckpt_path",
        "a checkpoint fit resumes from, or whose weights validate/test/predict use: a path, last or best [default: null]",
    ),
    (
        "checkpoint_io",
        "sync, or async (write checkpoints on a background thread) [default: sync]",
    ),
    (
        "ddp_bucket_cap_mb",
        "ddp: megabytes of gradients per all-reduce [default: 25]",
    ),
    (
        "ddp_timeout",
        "ddp: seconds a collective may wait for the other ranks before the run fails [default: 1800]",
    ),
];

/// A number of batches: an absolute count, or a fraction of what the loader has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// This many batches (capped at what the loader has).
    Batches(u64),
    /// This share of the loader's batches, in `[0, 1]`.
    Fraction(f64),
}

impl Limit {
    /// Batches to run when the loader has `available`. A fraction rounds down but keeps at
    /// least one batch when it is non-zero (as Lightning does).
    pub fn of(self, available: usize) -> usize {
        match self {
            Limit::Batches(n) => usize::try_from(n).unwrap_or(usize::MAX).min(available),
            Limit::Fraction(f) => {
                let n = (available as f64 * f).floor() as usize;
                if f > 0.0 && available > 0 {
                    n.max(1)
                } else {
                    n
                }
            }
        }
    }

    fn to_value(self) -> Value {
        match self {
            Limit::Batches(n) => json!(n),
            Limit::Fraction(f) => json!(f),
        }
    }
}

/// How `gradient_clip_val` is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClipAlgorithm {
    /// Scale every gradient so that their global L2 norm is at most the value.
    Norm,
    /// Clamp each gradient element to `[-value, value]`.
    Value,
}

/// A logger chosen by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggerKind {
    /// `metrics.csv` and `hparams.yaml`.
    Csv,
    /// TensorBoard event files.
    TensorBoard,
}

impl LoggerKind {
    fn name(self) -> &'static str {
        match self {
            LoggerKind::Csv => "csv",
            LoggerKind::TensorBoard => "tensorboard",
        }
    }
}

/// A callback as a config file names it: `class_path` and its `init_args`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSpec {
    /// The callback's name, e.g. `EarlyStopping` (case and `_` do not matter).
    pub class_path: String,
    /// Its settings, a table.
    pub init_args: Value,
}

/// Loop options, resolved from the `trainer` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerOptions {
    /// Epochs to train; with `max_steps` also unset, 1000.
    pub max_epochs: Option<u64>,
    /// Epochs before early stopping may stop the run.
    pub min_epochs: u64,
    /// Optimizer steps to take at most.
    pub max_steps: Option<u64>,
    /// Training batches per epoch.
    pub limit_train_batches: Limit,
    /// Validation batches per pass.
    pub limit_val_batches: Limit,
    /// Test batches per pass.
    pub limit_test_batches: Limit,
    /// Predict batches.
    pub limit_predict_batches: Limit,
    /// When to validate within an epoch.
    pub val_check_interval: Limit,
    /// Validate every N epochs (`None`: only by `val_check_interval` batch counts).
    pub check_val_every_n_epoch: Option<u64>,
    /// Validation batches before training (`None`: all).
    pub num_sanity_val_steps: Option<u64>,
    /// Batches per loop in a fast dev run (0: off).
    pub fast_dev_run: u64,
    /// Train and validate on the first batches of the training set, unshuffled.
    pub overfit_batches: Limit,
    /// Seed for everything random; `None` draws one.
    pub seed: Option<u64>,
    /// Require bitwise reproducible kernels.
    pub deterministic: bool,
    /// Batches per optimizer step.
    pub accumulate_grad_batches: u64,
    /// Clip threshold.
    pub gradient_clip_val: Option<f64>,
    /// How to clip.
    pub gradient_clip_algorithm: ClipAlgorithm,
    /// Steps between step-metric writes.
    pub log_every_n_steps: u64,
    /// Show a progress bar on a terminal.
    pub enable_progress_bar: bool,
    /// Add a default ModelCheckpoint.
    pub enable_checkpointing: bool,
    /// Root of logs and checkpoints.
    pub default_root_dir: PathBuf,
    /// Loggers to write with.
    pub logger: Vec<LoggerKind>,
    /// Callbacks from config.
    pub callbacks: Vec<CallbackSpec>,
    /// Checkpoint to load weights from before validate/test/predict.
    pub ckpt_path: Option<PathBuf>,
    /// Write checkpoints on a background thread.
    pub async_checkpointing: bool,
    /// Megabytes of gradients per all-reduce under ddp.
    pub ddp_bucket_cap_mb: f64,
    /// Seconds a collective may wait for the other ranks under ddp.
    pub ddp_timeout: f64,
}

impl Default for TrainerOptions {
    fn default() -> Self {
        Self {
            max_epochs: None,
            min_epochs: 0,
            max_steps: None,
            limit_train_batches: Limit::Fraction(1.0),
            limit_val_batches: Limit::Fraction(1.0),
            limit_test_batches: Limit::Fraction(1.0),
            limit_predict_batches: Limit::Fraction(1.0),
            val_check_interval: Limit::Fraction(1.0),
            check_val_every_n_epoch: Some(1),
            num_sanity_val_steps: Some(2),
            fast_dev_run: 0,
            overfit_batches: Limit::Batches(0),
            seed: None,
            deterministic: false,
            accumulate_grad_batches: 1,
            gradient_clip_val: None,
            gradient_clip_algorithm: ClipAlgorithm::Norm,
            log_every_n_steps: 50,
            enable_progress_bar: true,
            enable_checkpointing: true,
            default_root_dir: PathBuf::from("."),
            logger: vec![LoggerKind::Csv],
            callbacks: Vec::new(),
            ckpt_path: None,
            async_checkpointing: false,
            ddp_bucket_cap_mb: 25.0,
            ddp_timeout: 1800.0,
        }
    }
}

/// Whether `key` is a loop option.
pub fn is_option_key(key: &str) -> bool {
    OPTION_KEYS.iter().any(|(k, _)| *k == key)
}

impl TrainerOptions {
    /// Epochs the fit loop may run at most (Lightning's 1000 when nothing bounds it).
    pub fn epoch_limit(&self) -> u64 {
        match (self.max_epochs, self.max_steps) {
            (Some(e), _) => e,
            (None, Some(_)) => u64::MAX,
            (None, None) => 1000,
        }
    }

    /// Sets one option from its config value. `key` must satisfy [`is_option_key`].
    pub fn set(&mut self, key: &str, value: &Value) -> PlanResult<()> {
        let flag = format!("--trainer.{key}");
        let err = |allowed: &str| FlagError::new(&flag, render(value), allowed);
        match key {
            "max_epochs" => {
                self.max_epochs = match value {
                    Value::Null => None,
                    v => Some(positive(v).ok_or_else(|| err("an integer > 0"))?),
                }
            }
            "min_epochs" => self.min_epochs = count(value).ok_or_else(|| err("an integer >= 0"))?,
            "max_steps" => {
                self.max_steps = optional_count(value)
                    .ok_or_else(|| err("an integer > 0, or -1 for no limit"))?
            }
            "limit_train_batches" => self.limit_train_batches = limit(value, &flag)?,
            "limit_val_batches" => self.limit_val_batches = limit(value, &flag)?,
            "limit_test_batches" => self.limit_test_batches = limit(value, &flag)?,
            "limit_predict_batches" => self.limit_predict_batches = limit(value, &flag)?,
            "val_check_interval" => {
                let interval = limit(value, &flag)?;
                if matches!(interval, Limit::Batches(0) | Limit::Fraction(0.0)) {
                    return Err(err("a number of batches > 0, or a fraction in (0, 1]"));
                }
                self.val_check_interval = interval;
            }
            "check_val_every_n_epoch" => {
                self.check_val_every_n_epoch = match value {
                    Value::Null => None,
                    v => Some(positive(v).ok_or_else(|| err("an integer > 0, or null"))?),
                }
            }
            "num_sanity_val_steps" => {
                self.num_sanity_val_steps = optional_count(value)
                    .or_else(|| (integer(value) == Some(0)).then_some(Some(0)))
                    .ok_or_else(|| err("an integer >= 0, or -1 for all"))?
            }
            "fast_dev_run" => {
                self.fast_dev_run = match boolean(value) {
                    Some(true) => 1,
                    Some(false) => 0,
                    None => count(value).ok_or_else(|| err("true, false, or an integer >= 0"))?,
                }
            }
            "overfit_batches" => self.overfit_batches = limit(value, &flag)?,
            "seed" => {
                self.seed = match value {
                    Value::Null => None,
                    v => Some(count(v).ok_or_else(|| err("an integer >= 0, or null"))?),
                }
            }
            "deterministic" => {
                self.deterministic = boolean(value).ok_or_else(|| err("true or false"))?
            }
            "accumulate_grad_batches" => {
                self.accumulate_grad_batches =
                    positive(value).ok_or_else(|| err("an integer > 0"))?
            }
            "gradient_clip_val" => {
                self.gradient_clip_val = match value {
                    Value::Null => None,
                    v => Some(
                        number(v)
                            .filter(|x| x.is_finite() && *x > 0.0)
                            .ok_or_else(|| err("a number > 0, or null"))?,
                    ),
                }
            }
            "gradient_clip_algorithm" => {
                self.gradient_clip_algorithm = match render(value).to_ascii_lowercase().as_str() {
                    "norm" => ClipAlgorithm::Norm,
                    "value" => ClipAlgorithm::Value,
                    _ => return Err(err("norm or value")),
                }
            }
            "log_every_n_steps" => {
                self.log_every_n_steps = positive(value).ok_or_else(|| err("an integer > 0"))?
            }
            "enable_progress_bar" => {
                self.enable_progress_bar = boolean(value).ok_or_else(|| err("true or false"))?
            }
            "enable_checkpointing" => {
                self.enable_checkpointing = boolean(value).ok_or_else(|| err("true or false"))?
            }
            "default_root_dir" => {
                self.default_root_dir = match value {
                    Value::String(s) if !s.is_empty() => PathBuf::from(s),
                    _ => return Err(err("a directory path")),
                }
            }
            "logger" => {
                self.logger = loggers(value).ok_or_else(|| {
                    err("true, false, csv, tensorboard, or a list of csv and tensorboard")
                })?
            }
            "callbacks" => {
                let specs = callbacks(value, &flag)?;
                crate::callbacks::from_specs(&specs)?;
                self.callbacks = specs;
            }
            "ckpt_path" => {
                self.ckpt_path = match value {
                    Value::Null => None,
                    Value::String(s) if !s.is_empty() => Some(PathBuf::from(s)),
                    _ => return Err(err("a checkpoint file path, or null")),
                }
            }
            "checkpoint_io" => {
                self.async_checkpointing = match render(value).trim().to_ascii_lowercase().as_str()
                {
                    "sync" => false,
                    "async" => true,
                    _ => return Err(err("sync or async")),
                }
            }
            "ddp_bucket_cap_mb" => {
                self.ddp_bucket_cap_mb = number(value)
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| err("a number of megabytes > 0"))?
            }
            "ddp_timeout" => {
                self.ddp_timeout = number(value)
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| err("a number of seconds > 0"))?
            }
            _ => return Err(err("not a trainer loop option")),
        }
        Ok(())
    }

    /// The options as entries of the `trainer` config section.
    pub fn to_value(&self) -> serde_json::Map<String, Value> {
        let callbacks: Vec<Value> = self
            .callbacks
            .iter()
            .map(|c| json!({"class_path": c.class_path, "init_args": c.init_args}))
            .collect();
        let value = json!({
            "max_epochs": self.max_epochs,
            "min_epochs": self.min_epochs,
            "max_steps": self.max_steps.map_or(-1, |s| s as i64),
            "limit_train_batches": self.limit_train_batches.to_value(),
            "limit_val_batches": self.limit_val_batches.to_value(),
            "limit_test_batches": self.limit_test_batches.to_value(),
            "limit_predict_batches": self.limit_predict_batches.to_value(),
            "val_check_interval": self.val_check_interval.to_value(),
            "check_val_every_n_epoch": self.check_val_every_n_epoch,
            "num_sanity_val_steps": self.num_sanity_val_steps.map_or(-1, |s| s as i64),
            "fast_dev_run": self.fast_dev_run,
            "overfit_batches": self.overfit_batches.to_value(),
            "seed": self.seed,
            "deterministic": self.deterministic,
            "accumulate_grad_batches": self.accumulate_grad_batches,
            "gradient_clip_val": self.gradient_clip_val,
            "gradient_clip_algorithm": match self.gradient_clip_algorithm {
                ClipAlgorithm::Norm => "norm",
                ClipAlgorithm::Value => "value",
            },
            "log_every_n_steps": self.log_every_n_steps,
            "enable_progress_bar": self.enable_progress_bar,
            "enable_checkpointing": self.enable_checkpointing,
            "default_root_dir": self.default_root_dir.display().to_string(),
            "logger": self.logger.iter().map(|l| l.name()).collect::<Vec<_>>(),
            "callbacks": callbacks,
            "ckpt_path": self.ckpt_path.as_ref().map(|p| p.display().to_string()),
            "checkpoint_io": if self.async_checkpointing { "async" } else { "sync" },
            "ddp_bucket_cap_mb": self.ddp_bucket_cap_mb,
            "ddp_timeout": self.ddp_timeout,
        });
        match value {
            Value::Object(map) => map,
            _ => unreachable!("json! of an object literal is an object"),
        }
    }
}

/// Reads a callback's `init_args` into its settings type; unknown or mistyped keys name the
/// callback and the flag.
pub fn init_args<T: DeserializeOwned>(spec: &CallbackSpec) -> PlanResult<T> {
    serde_json::from_value(spec.init_args.clone()).map_err(|e| {
        FlagError::new(
            "--trainer.callbacks",
            render(&spec.init_args),
            format!("bad init_args for {}: {e}", spec.class_path),
        )
    })
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn count(value: &Value) -> Option<u64> {
    integer(value).and_then(|n| u64::try_from(n).ok())
}

fn positive(value: &Value) -> Option<u64> {
    count(value).filter(|n| *n > 0)
}

/// `-1` (or null) is `None`, a positive integer is `Some`.
fn optional_count(value: &Value) -> Option<Option<u64>> {
    match (value, integer(value)) {
        (Value::Null, _) | (_, Some(-1)) => Some(None),
        (_, Some(n)) if n > 0 => Some(Some(n as u64)),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn boolean(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// An integer is a batch count; a number with a fraction part (or `1.0`) is a fraction.
fn limit(value: &Value, flag: &str) -> PlanResult<Limit> {
    let err = || {
        FlagError::new(
            flag,
            render(value),
            "an integer >= 0 (batches), or a fraction in [0.0, 1.0]",
        )
    };
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => return Err(err()),
    };
    if let Ok(n) = text.parse::<u64>() {
        return Ok(Limit::Batches(n));
    }
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(Limit::Fraction(f)),
        _ => Err(err()),
    }
}

fn logger_kind(value: &Value) -> Option<LoggerKind> {
    match render(value).trim().to_ascii_lowercase().as_str() {
        "csv" | "csvlogger" => Some(LoggerKind::Csv),
        "tensorboard" | "tensorboardlogger" => Some(LoggerKind::TensorBoard),
        _ => None,
    }
}

fn loggers(value: &Value) -> Option<Vec<LoggerKind>> {
    match (boolean(value), value) {
        (Some(true), _) => Some(vec![LoggerKind::Csv]),
        (Some(false), _) | (None, Value::Null) => Some(Vec::new()),
        (None, Value::Array(items)) => {
            let mut kinds: Vec<LoggerKind> =
                items.iter().map(logger_kind).collect::<Option<_>>()?;
            kinds.dedup();
            Some(kinds)
        }
        (None, v) => logger_kind(v).map(|k| vec![k]),
    }
}

fn callbacks(value: &Value, flag: &str) -> PlanResult<Vec<CallbackSpec>> {
    let err = |v: &Value| {
        FlagError::new(
            flag,
            render(v),
            "a list whose entries are callback names or {class_path, init_args} tables",
        )
    };
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items.clone(),
        Value::String(_) | Value::Object(_) => vec![value.clone()],
        other => return Err(err(other)),
    };
    items
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
                    .ok_or_else(|| err(item))?;
                if let Some(extra) = table
                    .keys()
                    .find(|k| *k != "class_path" && *k != "init_args")
                {
                    return Err(FlagError::new(
                        flag,
                        render(item),
                        format!("unknown key `{extra}` in a callback entry; allowed: class_path, init_args"),
                    ));
                }
                Ok(CallbackSpec {
                    class_path: class_path.to_owned(),
                    init_args: table.get("init_args").cloned().unwrap_or_else(|| json!({})),
                })
            }
            other => Err(err(other)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: Value) -> PlanResult<TrainerOptions> {
        let mut o = TrainerOptions::default();
        o.set(key, &value).map(|()| o)
    }

    #[test]
    fn limits_are_counts_or_fractions() {
        assert_eq!(
            set("limit_train_batches", json!(5))
                .unwrap()
                .limit_train_batches,
            Limit::Batches(5)
        );
        assert_eq!(
            set("limit_train_batches", json!(0.25))
                .unwrap()
                .limit_train_batches,
            Limit::Fraction(0.25)
        );
        assert_eq!(
            set("limit_train_batches", json!("1.0"))
                .unwrap()
                .limit_train_batches,
            Limit::Fraction(1.0)
        );
        let e = set("limit_val_batches", json!(1.5)).unwrap_err();
        assert_eq!(e.flag, "--trainer.limit_val_batches");
        assert!(set("val_check_interval", json!(0)).is_err());
        assert_eq!(Limit::Fraction(0.01).of(20), 1);
        assert_eq!(Limit::Fraction(0.5).of(21), 10);
        assert_eq!(Limit::Batches(100).of(21), 21);
        assert_eq!(Limit::Fraction(0.0).of(21), 0);
    }

    #[test]
    fn steps_and_sanity_accept_minus_one() {
        assert_eq!(set("max_steps", json!(-1)).unwrap().max_steps, None);
        assert_eq!(set("max_steps", json!(7)).unwrap().max_steps, Some(7));
        assert!(set("max_steps", json!(0)).is_err());
        assert_eq!(
            set("num_sanity_val_steps", json!(0))
                .unwrap()
                .num_sanity_val_steps,
            Some(0)
        );
        assert_eq!(
            set("num_sanity_val_steps", json!(-1))
                .unwrap()
                .num_sanity_val_steps,
            None
        );
        assert!(set("num_sanity_val_steps", json!(-2)).is_err());
    }

    #[test]
    fn fast_dev_run_is_a_bool_or_a_count() {
        assert_eq!(set("fast_dev_run", json!(true)).unwrap().fast_dev_run, 1);
        assert_eq!(set("fast_dev_run", json!("false")).unwrap().fast_dev_run, 0);
        assert_eq!(set("fast_dev_run", json!(3)).unwrap().fast_dev_run, 3);
        assert!(set("fast_dev_run", json!("maybe")).is_err());
    }

    #[test]
    fn loggers_and_callbacks_parse() {
        assert_eq!(set("logger", json!(false)).unwrap().logger, vec![]);
        assert_eq!(
            set("logger", json!(["csv", "TensorBoard"])).unwrap().logger,
            vec![LoggerKind::Csv, LoggerKind::TensorBoard]
        );
        assert!(set("logger", json!("wandb")).is_err());
        let o = set(
            "callbacks",
            json!(["LearningRateMonitor", {"class_path": "EarlyStopping", "init_args": {"monitor": "val_acc"}}]),
        )
        .unwrap();
        assert_eq!(o.callbacks.len(), 2);
        assert_eq!(o.callbacks[1].init_args["monitor"], "val_acc");
        let e = set(
            "callbacks",
            json!([{"class_path": "EarlyStopping", "args": {}}]),
        )
        .unwrap_err();
        assert!(e.message.contains("`args`"), "{e}");
    }

    #[test]
    fn defaults_round_trip_through_config_values() {
        let defaults = TrainerOptions {
            max_epochs: Some(3),
            seed: Some(9),
            ..TrainerOptions::default()
        };
        let mut parsed = TrainerOptions::default();
        for (key, value) in defaults.to_value() {
            parsed.set(&key, &value).unwrap();
        }
        assert_eq!(parsed, defaults);
    }

    #[test]
    fn epoch_limit_follows_lightning() {
        let mut o = TrainerOptions::default();
        assert_eq!(o.epoch_limit(), 1000);
        o.max_steps = Some(5);
        assert_eq!(o.epoch_limit(), u64::MAX);
        o.max_epochs = Some(2);
        assert_eq!(o.epoch_limit(), 2);
    }
}
