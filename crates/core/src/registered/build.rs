//! Building callbacks and loggers by the names a config gives them.

use std::path::Path;

use super::Plugins;
use crate::callbacks::Callback;
use crate::error::{FlagError, PlanResult};
use crate::loggers::{LOGS_DIR_NAME, Loggers, next_version_dir};
use crate::options::{CallbackSpec, unknown_callback};

/// Builds the callback a config entry names, one of ember's or an application's. Names match
/// case- and `_`-insensitively, and a Lightning class path
/// (`lightning.pytorch.callbacks.EarlyStopping`) uses its last part.
pub fn callback(spec: &CallbackSpec, plugins: &Plugins) -> PlanResult<Box<dyn Callback>> {
    let flag_error =
        |message: String| FlagError::new("--trainer.callbacks", &spec.class_path, message);
    let Some(built) = plugins.callback(&spec.class_path, &spec.init_args) else {
        let names = plugins.catalog().callbacks.iter().map(|(n, _)| n.as_str());
        return Err(flag_error(unknown_callback(names)));
    };
    // A built-in's refusal names its flag already.
    built.map_err(|e| match e.downcast::<FlagError>() {
        Ok(e) => e,
        Err(e) => flag_error(format!("{e:#}")),
    })
}

/// Builds every callback of a config list (a typo is a plan-time error).
pub fn callbacks(specs: &[CallbackSpec], plugins: &Plugins) -> PlanResult<Vec<Box<dyn Callback>>> {
    specs.iter().map(|spec| callback(spec, plugins)).collect()
}

/// The loggers `names` select, in a fresh version directory under `root` (none with no
/// names), plus the tracing text logger.
pub fn loggers(root: &Path, names: &[String], plugins: &Plugins) -> anyhow::Result<Loggers> {
    let chosen = plugins.logger_names(names)?;
    if chosen.is_empty() {
        return Ok(Loggers::new(Vec::new(), None));
    }
    let log_dir = next_version_dir(&root.join(LOGS_DIR_NAME))?;
    let built = chosen
        .into_iter()
        .map(|name| plugins.logger(name, &log_dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Loggers::new(built, Some(log_dir)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

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
            assert_eq!(
                callback(&spec, &Plugins::builtin()).unwrap().name(),
                "EarlyStopping"
            );
        }
        let spec = CallbackSpec {
            class_path: "Swa".into(),
            init_args: json!({}),
        };
        let e = callback(&spec, &Plugins::builtin()).err().unwrap();
        assert!(e.message.contains("ModelCheckpoint"), "{e}");
        let spec = CallbackSpec {
            class_path: "EarlyStopping".into(),
            init_args: json!({"monitor": "x", "patiense": 2}),
        };
        let e = callback(&spec, &Plugins::builtin()).err().unwrap();
        assert!(e.message.contains("patiense"), "{e}");
    }

    /// A logger that records the names of the metrics it is given.
    struct Recording(Arc<Mutex<Vec<String>>>);

    impl crate::loggers::Logger for Recording {
        fn log_hyperparams(&mut self, _: &serde_json::Value) -> anyhow::Result<()> {
            Ok(())
        }

        fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, _: u64) -> anyhow::Result<()> {
            self.0.lock().unwrap().extend(metrics.keys().cloned());
            Ok(())
        }
    }

    #[test]
    fn a_registered_logger_is_reached_by_any_name_the_logger_option_compares_equal() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&seen);
        let plugins = Plugins::builtin()
            .register_logger("jsonl", "JSON lines", move |_| {
                Ok(Recording(Arc::clone(&shared)))
            })
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut built = loggers(dir.path(), &["JsonlLogger".to_owned()], &plugins).unwrap();
        built
            .log_metrics(&[("loss".to_owned(), 1.0)].into(), 3)
            .unwrap();
        assert_eq!(*seen.lock().unwrap(), ["loss"]);
    }
}
