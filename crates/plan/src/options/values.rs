//! The value types of the loop options and how each reads and writes a config value.
//!
//! A [`Kind`] is one way of reading an option: `Positive` reads an integer > 0, `Limit` a
//! count or a fraction, and so on. The option table in [`super`] names a kind per option, so
//! an option's parsing, its error message and its serialisation come from one place.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::error::render;

/// How an option's config value is read and written back.
pub trait Kind {
    /// The field type it produces.
    type Value;

    /// The value, or what is allowed (for the error naming the flag and the value).
    fn parse(value: &Value) -> Result<Self::Value, String>;

    /// The value as a config entry; [`Kind::parse`] reads it back to the same value.
    fn write(value: &Self::Value) -> Value;
}

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
}

impl Kind for Limit {
    type Value = Limit;

    /// An integer is a batch count; a number with a fraction part (or `1.0`) is a fraction.
    fn parse(value: &Value) -> Result<Limit, String> {
        let allowed = || "an integer >= 0 (batches), or a fraction in [0.0, 1.0]".to_owned();
        let text = match value {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.trim().to_owned(),
            _ => return Err(allowed()),
        };
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Limit::Batches(n));
        }
        match text.parse::<f64>() {
            Ok(f) if (0.0..=1.0).contains(&f) => Ok(Limit::Fraction(f)),
            _ => Err(allowed()),
        }
    }

    fn write(value: &Limit) -> Value {
        match value {
            Limit::Batches(n) => json!(n),
            Limit::Fraction(f) => json!(f),
        }
    }
}

/// A [`Limit`] that is not zero: how often validation runs within an epoch.
pub struct Interval;

impl Kind for Interval {
    type Value = Limit;

    fn parse(value: &Value) -> Result<Limit, String> {
        match Limit::parse(value) {
            Ok(Limit::Batches(0) | Limit::Fraction(0.0)) | Err(_) => {
                Err("a number of batches > 0, or a fraction in (0, 1]".into())
            }
            Ok(limit) => Ok(limit),
        }
    }

    fn write(value: &Limit) -> Value {
        Limit::write(value)
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

impl Kind for ClipAlgorithm {
    type Value = ClipAlgorithm;

    fn parse(value: &Value) -> Result<ClipAlgorithm, String> {
        match render(value).to_ascii_lowercase().as_str() {
            "norm" => Ok(ClipAlgorithm::Norm),
            "value" => Ok(ClipAlgorithm::Value),
            _ => Err("norm or value".into()),
        }
    }

    fn write(value: &ClipAlgorithm) -> Value {
        json!(match value {
            ClipAlgorithm::Norm => "norm",
            ClipAlgorithm::Value => "value",
        })
    }
}

/// How checkpoints are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointWrites {
    /// On the training thread, before the loop goes on.
    Sync,
    /// On a background thread, while training goes on.
    Async,
}

impl Kind for CheckpointWrites {
    type Value = CheckpointWrites;

    fn parse(value: &Value) -> Result<CheckpointWrites, String> {
        match render(value).trim().to_ascii_lowercase().as_str() {
            "sync" => Ok(CheckpointWrites::Sync),
            "async" => Ok(CheckpointWrites::Async),
            _ => Err("sync or async".into()),
        }
    }

    fn write(value: &CheckpointWrites) -> Value {
        json!(match value {
            CheckpointWrites::Sync => "sync",
            CheckpointWrites::Async => "async",
        })
    }
}

/// What `profiler` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfilerKind {
    /// A table per entry point: each phase's count, mean, total and share of the entry point's
    /// time (Lightning's `SimpleProfiler`).
    Simple,
    /// A trace per rank in Chrome's trace-event JSON, spans nested by phase.
    Advanced,
}

/// `simple`, `advanced`, or null (or false) for none.
pub struct ProfilerChoice;

impl Kind for ProfilerChoice {
    type Value = Option<ProfilerKind>;

    fn parse(value: &Value) -> Result<Option<ProfilerKind>, String> {
        match render(value).trim().to_ascii_lowercase().as_str() {
            "null" | "none" | "false" | "" => Ok(None),
            "simple" => Ok(Some(ProfilerKind::Simple)),
            "advanced" => Ok(Some(ProfilerKind::Advanced)),
            _ => Err("simple, advanced, or null for none".into()),
        }
    }

    fn write(value: &Option<ProfilerKind>) -> Value {
        match value {
            None => Value::Null,
            Some(ProfilerKind::Simple) => json!("simple"),
            Some(ProfilerKind::Advanced) => json!("advanced"),
        }
    }
}

/// The logger `logger=true` chooses.
pub const DEFAULT_LOGGER: &str = "csv";

/// A logger name as names are compared: its last path part (`a.b.CSVLogger`), lowercase,
/// without a `logger` suffix, so Lightning's class names select ember's loggers.
pub fn logger_key(name: &str) -> String {
    let last = name.trim().rsplit(['.', ':']).next().unwrap_or_default();
    let lower = last.to_ascii_lowercase();
    match lower.strip_suffix("logger") {
        Some(stem) if !stem.is_empty() => stem.to_owned(),
        _ => lower,
    }
}

/// Whether the logger option reads `name` as a flag (`true`, `false`) rather than a logger's
/// name, so that no logger can be registered under it.
pub fn is_logger_flag(name: &str) -> bool {
    boolean(&Value::String(name.to_owned())).is_some()
}

/// What is allowed when a logger name is not known: the flags and the registered names.
pub fn unknown_logger<'a>(registered: impl IntoIterator<Item = &'a str>) -> String {
    format!(
        "unknown logger; allowed: true, false, {}",
        crate::error::list(registered)
    )
}

/// The `logger` option: `true` (the csv logger), `false`, a registered logger's name, or a
/// list of names (ember-core checks them against the registry when it builds the loggers).
pub struct LoggerNames;

impl Kind for LoggerNames {
    type Value = Vec<String>;

    fn parse(value: &Value) -> Result<Vec<String>, String> {
        let name = |v: &Value| match v {
            Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_ascii_lowercase()),
            _ => None,
        };
        let names = match (boolean(value), value) {
            (Some(true), _) => Some(vec![DEFAULT_LOGGER.to_owned()]),
            (Some(false), _) | (None, Value::Null) => Some(Vec::new()),
            (None, Value::Array(items)) => items.iter().map(name).collect::<Option<Vec<_>>>(),
            (None, v) => name(v).map(|n| vec![n]),
        };
        let mut names = names.ok_or_else(|| {
            "true, false, a registered logger's name (csv, tensorboard, mlflow, ...), or a list of them"
                .to_owned()
        })?;
        let mut seen = Vec::new();
        names.retain(|n| {
            let key = logger_key(n);
            let first = !seen.contains(&key);
            seen.push(key);
            first
        });
        Ok(names)
    }

    fn write(value: &Vec<String>) -> Value {
        json!(value)
    }
}

/// Declares a [`Kind`] for a scalar option from its field type, a reader returning `None`
/// for a value that is not allowed, what is allowed, and a writer.
macro_rules! scalar_kind {
    ($(#[doc = $doc:literal])* $name:ident: $ty:ty, $allowed:literal,
     |$v:ident| $parse:expr, |$w:ident| $write:expr) => {
        $(#[doc = $doc])*
        pub struct $name;

        impl Kind for $name {
            type Value = $ty;

            fn parse($v: &Value) -> Result<$ty, String> {
                let parsed: Option<$ty> = $parse;
                parsed.ok_or_else(|| $allowed.into())
            }

            fn write($w: &$ty) -> Value {
                $write
            }
        }
    };
}

scalar_kind!(
    /// An integer >= 0.
    Count: u64, "an integer >= 0", |v| count(v), |w| json!(w)
);
scalar_kind!(
    /// An integer > 0.
    Positive: u64, "an integer > 0", |v| positive(v), |w| json!(w)
);
scalar_kind!(
    /// An integer > 0, or null for none.
    PositiveOrNull: Option<u64>, "an integer > 0, or null",
    |v| match v { Value::Null => Some(None), v => positive(v).map(Some) },
    |w| json!(w)
);
scalar_kind!(
    /// An integer >= 0, or null for none.
    CountOrNull: Option<u64>, "an integer >= 0, or null",
    |v| match v { Value::Null => Some(None), v => count(v).map(Some) },
    |w| json!(w)
);
scalar_kind!(
    /// An integer >= 0, or -1 (or null) for no limit.
    StepLimit: Option<u64>, "an integer >= 0, or -1 for no limit",
    |v| minus_one_is_none(v),
    |w| json!(w.map_or(-1, |s| s as i64))
);
scalar_kind!(
    /// An integer >= 0, -1 for no limit (`u64::MAX`), or null for the default.
    EpochLimit: Option<u64>, "an integer >= 0, -1 for no limit, or null",
    |v| match (v, integer(v)) {
        (Value::Null, _) => Some(None),
        (_, Some(-1)) => Some(Some(u64::MAX)),
        _ => count(v).map(Some),
    },
    |w| match w {
        Some(u64::MAX) => json!(-1),
        other => json!(other),
    }
);
scalar_kind!(
    /// An integer >= 0, or -1 for all.
    SanitySteps: Option<u64>, "an integer >= 0, or -1 for all",
    |v| minus_one_is_none(v),
    |w| json!(w.map_or(-1, |s| s as i64))
);
scalar_kind!(
    /// `true` (1), `false` (0), or a count.
    FlagOrCount: u64, "true, false, or an integer >= 0",
    |v| boolean(v).map(u64::from).or_else(|| count(v)),
    |w| json!(w)
);
scalar_kind!(
    /// `true` or `false`.
    Flag: bool, "true or false", |v| boolean(v), |w| json!(w)
);
scalar_kind!(
    /// `true`, `false`, or null for the accelerator's default.
    FlagOrNull: Option<bool>, "true, false, or null (the accelerator's default)",
    |v| match v { Value::Null => Some(None), v => boolean(v).map(Some) },
    |w| json!(w)
);
scalar_kind!(
    /// A number > 0, or null for none.
    ThresholdOrNull: Option<f64>, "a number > 0, or null",
    |v| match v { Value::Null => Some(None), v => positive_number(v).map(Some) },
    |w| json!(w)
);
scalar_kind!(
    /// A number of megabytes > 0.
    Megabytes: f64, "a number of megabytes > 0", |v| positive_number(v), |w| json!(w)
);
scalar_kind!(
    /// A number of seconds > 0.
    Seconds: f64, "a number of seconds > 0", |v| positive_number(v), |w| json!(w)
);
scalar_kind!(
    /// A directory path.
    Directory: PathBuf, "a directory path",
    |v| non_empty_string(v).map(PathBuf::from),
    |w| json!(w.display().to_string())
);
scalar_kind!(
    /// A file path, or null for none.
    FileOrNull: Option<PathBuf>, "a checkpoint file path, or null",
    |v| match v { Value::Null => Some(None), v => non_empty_string(v).map(|s| Some(PathBuf::from(s))) },
    |w| json!(w.as_ref().map(|p| p.display().to_string()))
);

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

/// `-1` (or null) is `None`, an integer >= 0 is `Some`.
fn minus_one_is_none(value: &Value) -> Option<Option<u64>> {
    match (value, integer(value)) {
        (Value::Null, _) | (_, Some(-1)) => Some(None),
        (_, Some(n)) => u64::try_from(n).ok().map(Some),
        _ => None,
    }
}

fn positive_number(value: &Value) -> Option<f64> {
    let number = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    number.filter(|x| x.is_finite() && *x > 0.0)
}

fn non_empty_string(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s),
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
