//! Callbacks by name: built from a config's specs (a built-in, or one an application
//! registered), and held once built ([`BuiltCallbacks`]) for the Trainer that takes them.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::error::{FlagError, PlanResult};
use crate::options::{CallbackSpec, callback_key, init_args, unknown_callback};

/// Builds a callback registered by name from its `init_args` (a table; `{}` when none).
pub type CallbackFactory = Arc<dyn Fn(&Value) -> anyhow::Result<Box<dyn Callback>>>;

/// Builds a callback named in config: a built-in, else one of `registered`. Names match case-
/// and `_`-insensitively, and a Lightning class path (`lightning.pytorch.callbacks.EarlyStopping`)
/// uses its last part.
pub fn from_spec(
    spec: &CallbackSpec,
    registered: &[(String, CallbackFactory)],
) -> PlanResult<Box<dyn Callback>> {
    let flag_error =
        |message: String| FlagError::new("--trainer.callbacks", &spec.class_path, message);
    Ok(match spec.known_name() {
        Some("ModelCheckpoint") => Box::new(ModelCheckpoint::new(init_args(spec)?)),
        Some("EarlyStopping") => Box::new(EarlyStopping::new(init_args(spec)?)?),
        Some("BackboneFinetuning") => Box::new(BackboneFinetuning::new(init_args(spec)?)?),
        Some("LearningRateMonitor") => Box::new(LearningRateMonitor::new(init_args(spec)?)),
        Some("DeviceStatsMonitor") => Box::new(DeviceStatsMonitor::new(init_args(spec)?)),
        Some("ProgressBar") => Box::new(ProgressBar::new(init_args(spec)?)),
        Some("EMAWeightAveraging") => Box::new(EMAWeightAveraging::new(init_args(spec)?)?),
        Some("StochasticWeightAveraging") => {
            Box::new(StochasticWeightAveraging::new(init_args(spec)?)?)
        }
        _ => {
            let key = callback_key(&spec.class_path);
            let Some((_, factory)) = registered.iter().find(|(n, _)| callback_key(n) == key) else {
                let names = registered.iter().map(|(n, _)| n.as_str());
                return Err(flag_error(unknown_callback(names)));
            };
            factory(&spec.init_args).map_err(|e| flag_error(format!("{e:#}")))?
        }
    })
}

/// Callbacks built from the trainer flags at plan time (where a bad one is refused), held for
/// the Trainer that runs the job: the first to [`take`](Self::take) them gets them, so each is
/// constructed once. Clones share them.
#[derive(Clone, Default)]
pub struct BuiltCallbacks(Rc<RefCell<Held>>);

/// What a [`BuiltCallbacks`] holds: the callbacks, until taken.
type Held = Option<Vec<Box<dyn Callback>>>;

impl BuiltCallbacks {
    /// Holds `callbacks` for the Trainer.
    pub fn new(callbacks: Vec<Box<dyn Callback>>) -> Self {
        Self(Rc::new(RefCell::new(Some(callbacks))))
    }

    /// The callbacks, unless a Trainer took them already.
    pub fn take(&self) -> Option<Vec<Box<dyn Callback>>> {
        self.0.borrow_mut().take()
    }
}

impl std::fmt::Debug for BuiltCallbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0.borrow() {
            Some(callbacks) => write!(f, "BuiltCallbacks({} held)", callbacks.len()),
            None => write!(f, "BuiltCallbacks(taken)"),
        }
    }
}

/// Builds every callback of a config list (a typo is a plan-time error).
pub fn from_specs(
    specs: &[CallbackSpec],
    registered: &[(String, CallbackFactory)],
) -> PlanResult<Vec<Box<dyn Callback>>> {
    specs
        .iter()
        .map(|spec| from_spec(spec, registered))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_match_loosely_and_unknown_names_list_the_known() {
        for name in [
            "EarlyStopping",
            "early_stopping",
            "lightning.pytorch.callbacks.EarlyStopping",
        ] {
            let spec = CallbackSpec {
                class_path: name.into(),
                init_args: json!({"monitor": "val_loss"}),
            };
            assert_eq!(from_spec(&spec, &[]).unwrap().name(), "EarlyStopping");
        }
        let spec = CallbackSpec {
            class_path: "Swa".into(),
            init_args: json!({}),
        };
        let e = from_spec(&spec, &[]).err().unwrap();
        assert!(e.message.contains("ModelCheckpoint"), "{e}");
        let spec = CallbackSpec {
            class_path: "EarlyStopping".into(),
            init_args: json!({"monitor": "x", "patiense": 2}),
        };
        let e = from_spec(&spec, &[]).err().unwrap();
        assert!(e.message.contains("patiense"), "{e}");
    }
}
