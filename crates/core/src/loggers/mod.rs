//! Loggers: where metrics and hyperparameters go (Lightning's `Logger`).
//!
//! Every run that logs gets one directory, `<default_root_dir>/lightning_logs/version_N`
//! (N one past the highest existing version), shared by its loggers and its checkpoints.
//! Only global rank 0 writes; the other ranks get an empty [`Loggers`].

mod csv_logger;
pub mod curves;
pub mod mlflow;
mod tensorboard;
mod tracing_logger;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;

pub use csv_logger::{CsvLogger, HPARAMS_FILE, METRICS_FILE, read_rows};
pub use mlflow::MlflowLogger;
pub use tensorboard::{TensorBoardLogger, masked_crc};
pub use tracing_logger::TracingLogger;

/// Builds a logger registered by name, writing under the run's version directory.
pub type LoggerFactory = Arc<dyn Fn(&Path) -> anyhow::Result<Box<dyn Logger>>>;

/// A metric's value as ember prints it for people (the end-of-run summary, the progress bar):
/// a whole number as one (a counter reads `27`), anything else with 4 decimals.
pub(crate) fn shown(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.4}")
    }
}

/// Name of the directory under `default_root_dir` that holds the versions.
pub const LOGS_DIR_NAME: &str = "lightning_logs";

/// A sink for metrics and hyperparameters.
pub trait Logger {
    /// Records the run's configuration.
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()>;
    /// Records metrics at a step.
    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()>;
    /// Makes what was logged durable (called at epoch ends and at the end of the run).
    fn save(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// When an entry point ends (after `fit` drew `curves.png`), whether it succeeded: a
    /// tracking server's run is ended here (Lightning's `finalize`).
    fn finalize(&mut self, success: bool) -> anyhow::Result<()> {
        let _ = success;
        Ok(())
    }
}

/// The loggers of a run and the directory they share.
#[derive(Default)]
pub struct Loggers {
    loggers: Vec<Box<dyn Logger>>,
    log_dir: Option<PathBuf>,
}

impl Loggers {
    /// No loggers (ranks other than 0, fast dev runs, `logger=false`).
    pub fn none() -> Self {
        Self::default()
    }

    /// `loggers` writing in `log_dir`, plus the tracing text logger.
    pub fn new(loggers: Vec<Box<dyn Logger>>, log_dir: Option<PathBuf>) -> Self {
        let mut all: Vec<Box<dyn Logger>> = vec![Box::new(TracingLogger)];
        all.extend(loggers);
        Self {
            loggers: all,
            log_dir,
        }
    }

    /// Adds a logger written in Rust.
    pub fn push(&mut self, logger: Box<dyn Logger>) {
        self.loggers.push(logger);
    }

    /// The version directory, when the run has one.
    pub fn log_dir(&self) -> Option<&Path> {
        self.log_dir.as_deref()
    }

    /// Sends hyperparameters to every logger.
    pub fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        self.loggers
            .iter_mut()
            .try_for_each(|l| l.log_hyperparams(hparams))
    }

    /// Sends metrics to every logger.
    pub fn log_metrics(
        &mut self,
        metrics: &BTreeMap<String, f64>,
        step: u64,
    ) -> anyhow::Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        self.loggers
            .iter_mut()
            .try_for_each(|l| l.log_metrics(metrics, step))
    }

    /// Makes every logger's records durable.
    pub fn save(&mut self) -> anyhow::Result<()> {
        self.loggers.iter_mut().try_for_each(|l| l.save())
    }

    /// Tells every logger the entry point ended, and whether it succeeded.
    pub fn finalize(&mut self, success: bool) -> anyhow::Result<()> {
        self.loggers
            .iter_mut()
            .try_for_each(|l| l.finalize(success))
    }
}

/// Creates `<dir>/version_N` with N one past the highest existing version.
pub fn next_version_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut next = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix("version_"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            next = next.max(n + 1);
        }
    }
    // Another process may take the same number between the scan and the create: retry.
    loop {
        let path = dir.join(format!("version_{next}"));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => next += 1,
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up() {
        let root = std::env::temp_dir().join(format!("ember-versions-{}", std::process::id()));
        let a = next_version_dir(&root).unwrap();
        let b = next_version_dir(&root).unwrap();
        assert_eq!(a.file_name().unwrap(), "version_0");
        assert_eq!(b.file_name().unwrap(), "version_1");
        std::fs::create_dir(root.join("version_7")).unwrap();
        assert_eq!(
            next_version_dir(&root).unwrap().file_name().unwrap(),
            "version_8"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
