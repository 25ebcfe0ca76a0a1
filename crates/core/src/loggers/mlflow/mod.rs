//! `--trainer.logger=mlflow`: a run on an MLflow tracking server through its REST API
//! (`/api/2.0/mlflow/...`), as Lightning's `MLFlowLogger` records one: the hyperparameters as
//! params, every metric with its step, tags for the accelerator, strategy and precision, and
//! when an entry point ends `curves.png` (and, with `EMBER_MLFLOW_LOG_CHECKPOINTS=true`, the
//! checkpoints) as artifacts through the server's artifact proxy.
//!
//! The server is `MLFLOW_TRACKING_URI` (`http://` or `https://`, with MLflow's own variables for
//! certificates and credentials: docs/trainer.md, Loggers), the experiment
//! `MLFLOW_EXPERIMENT_NAME` (default `lightning_logs`, as Lightning's). The run always has a
//! local copy, `metrics.csv` and `hparams.yaml` in its version directory (a run whose only
//! logger is mlflow gets the csv logger too). A server that cannot be reached or refuses a
//! request gets one warning naming that copy; the run goes on, the logger holds what it has
//! not sent and tries again every [`RETRY_EVERY`], so a server that comes back gets the rest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

pub use self::background::MlflowLogger;
use self::connection::Connection;
use super::Logger;

mod background;
mod connection;

/// The environment variable naming the server.
pub const TRACKING_URI_VAR: &str = "MLFLOW_TRACKING_URI";
/// The environment variable naming the experiment.
pub const EXPERIMENT_VAR: &str = "MLFLOW_EXPERIMENT_NAME";
/// `true` uploads the run's checkpoints as artifacts when an entry point ends.
pub const LOG_CHECKPOINTS_VAR: &str = "EMBER_MLFLOW_LOG_CHECKPOINTS";
/// Metrics MLflow takes in one `log-batch` request at most.
const BATCH: usize = 1000;
/// Params it takes in one request at most.
const PARAMS_PER_BATCH: usize = 100;
/// How long the logger waits after a failed request before it tries the server again.
pub const RETRY_EVERY: Duration = Duration::from_secs(30);
/// Metrics it holds for a server that does not answer, at most; later ones are only in the
/// local copy.
const MAX_HELD: usize = 1_000_000;

/// The run on the server, once created.
struct Remote {
    run_id: String,
    /// Where the artifact proxy keeps this run's artifacts (`<experiment>/<run>/artifacts`).
    artifact_path: Option<String>,
}

/// Logs to an MLflow tracking server from the thread that calls it (the [`MlflowLogger`] a run
/// uses drives one on a thread of its own).
struct Tracker {
    connection: Connection,
    experiment: String,
    run_name: String,
    log_dir: PathBuf,
    remote: Option<Remote>,
    /// The run's tags, for when it is created.
    tags: Vec<Value>,
    /// Params not sent yet.
    pending_params: Vec<(String, String)>,
    /// Metrics not sent yet.
    pending: Vec<Value>,
    /// While the server does not answer: when to try it again.
    retry_at: Option<Instant>,
    /// Whether the server has failed during this run (it was warned about).
    failed_once: bool,
    /// Whether metrics beyond [`MAX_HELD`] were left to the local copy.
    dropped: bool,
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since.as_millis() as u64
}

impl Tracker {
    /// A tracker for the run whose files are in `log_dir`, to the server `MLFLOW_TRACKING_URI`
    /// names (an `http://` or `https://` URL; anything else is an error naming the variable).
    fn new(log_dir: &Path) -> anyhow::Result<Self> {
        let var = |name: &str| std::env::var(name).ok();
        Self::to(&var(TRACKING_URI_VAR).unwrap_or_default(), log_dir, var)
    }

    /// A logger to the server at `uri`, connected as `var` (the environment) says.
    fn to(uri: &str, log_dir: &Path, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        if !uri.starts_with("http://") && !uri.starts_with("https://") {
            // Bad input: a flag error (exit 2) naming the logger, the variable's value and what
            // is allowed.
            return Err(crate::error::FlagError::new(
                "--trainer.logger",
                "mlflow",
                format!(
                    "{TRACKING_URI_VAR}=http://HOST:PORT or https://HOST:PORT, an MLflow tracking server (got `{uri}`)"
                ),
            )
            .into());
        }
        let experiment = std::env::var(EXPERIMENT_VAR).unwrap_or_else(|_| "lightning_logs".into());
        let run_name = (log_dir.file_name())
            .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
        Ok(Self {
            connection: Connection::new(uri, var).map_err(|e| {
                crate::error::FlagError::new("--trainer.logger", "mlflow", format!("{e:#}"))
            })?,
            experiment,
            run_name,
            log_dir: log_dir.to_owned(),
            remote: None,
            tags: Vec::new(),
            pending_params: Vec::new(),
            pending: Vec::new(),
            retry_at: None,
            failed_once: false,
            dropped: false,
        })
    }

    fn post(&self, endpoint: &str, body: Value) -> anyhow::Result<Value> {
        let response = (self.connection)
            .request("POST", &self.connection.url(endpoint))
            .send_json(body);
        read(response, endpoint)
    }

    /// The experiment's id, made if it does not exist.
    fn experiment_id(&self) -> anyhow::Result<String> {
        let url = self.connection.url("experiments/get-by-name");
        let found = (self.connection)
            .request("GET", &url)
            .query("experiment_name", &self.experiment)
            .call();
        match found {
            Ok(response) => {
                let body: Value = response.into_json()?;
                id(&body["experiment"]["experiment_id"])
            }
            Err(ureq::Error::Status(404, _)) => {
                let made = self.post("experiments/create", json!({"name": self.experiment}))?;
                id(&made["experiment_id"])
            }
            Err(e) => Err(anyhow!("experiments/get-by-name: {e}")),
        }
    }

    /// Creates the run on first use: in the experiment, named after the version directory.
    fn remote(&mut self) -> anyhow::Result<&Remote> {
        if self.remote.is_none() {
            let experiment_id = self.experiment_id()?;
            let mut tags = self.tags.clone();
            tags.push(json!({"key": "mlflow.runName", "value": self.run_name}));
            let body = json!({
                "experiment_id": experiment_id,
                "run_name": self.run_name,
                "start_time": now_ms(),
                "tags": tags,
            });
            let made = self.post("runs/create", body)?;
            let info = &made["run"]["info"];
            let artifact_uri = info["artifact_uri"].as_str().unwrap_or_default();
            self.remote = Some(Remote {
                run_id: id(&info["run_id"])?,
                artifact_path: artifact_uri
                    .strip_prefix("mlflow-artifacts:")
                    .map(|p| p.trim_start_matches('/').to_owned()),
            });
        }
        Ok(self.remote.as_ref().expect("made above"))
    }

    /// Sends what is held (the run, its params, its metrics) unless the server failed less
    /// than [`RETRY_EVERY`] ago (`force`: try anyway). The first failure warns, naming the
    /// local copy; a server that answers again after one is announced.
    fn sync(&mut self, force: bool) -> bool {
        if !force && self.retry_at.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        match self.send_held() {
            Ok(()) => {
                if self.retry_at.take().is_some() {
                    eprintln!(
                        "MLflow logger: the server at {} answers again; it got what was held",
                        self.connection.shown()
                    );
                }
                true
            }
            Err(e) => {
                if !self.failed_once {
                    eprintln!(
                        "warning: MLflow logger: the server at {} failed ({e:#}); training goes on, the logger holds what it has not sent and tries again every {} s, and {} keeps the whole run",
                        self.connection.shown(),
                        RETRY_EVERY.as_secs(),
                        self.log_dir.join(super::METRICS_FILE).display()
                    );
                }
                self.failed_once = true;
                self.retry_at = Some(Instant::now() + RETRY_EVERY);
                false
            }
        }
    }

    /// Creates the run if need be, then sends the pending params and metrics.
    fn send_held(&mut self) -> anyhow::Result<()> {
        let run_id = self.remote()?.run_id.clone();
        while !self.pending_params.is_empty() {
            let n = self.pending_params.len().min(PARAMS_PER_BATCH);
            let params: Vec<Value> = (self.pending_params[..n].iter())
                .map(|(key, value)| json!({"key": key, "value": value}))
                .collect();
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "params": params}),
            )?;
            self.pending_params.drain(..n);
        }
        while !self.pending.is_empty() {
            let n = self.pending.len().min(BATCH);
            let metrics = &self.pending[..n];
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "metrics": metrics}),
            )?;
            self.pending.drain(..n);
        }
        Ok(())
    }

    /// Uploads a file as an artifact through the server's proxy.
    fn upload(&self, file: &Path, name: &str) -> anyhow::Result<()> {
        let Some(Remote {
            artifact_path: Some(path),
            ..
        }) = &self.remote
        else {
            bail!("the server does not proxy artifacts (start it with --serve-artifacts)");
        };
        let url = self.connection.artifact_url(&format!("{path}/{name}"));
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let response = self.connection.request("PUT", &url).send_bytes(&bytes);
        read(response, "mlflow-artifacts").map(drop)
    }

    /// The files an entry point's end uploads: curves.png, and the checkpoints when asked.
    fn artifacts(&self) -> Vec<(PathBuf, String)> {
        let mut files = Vec::new();
        let curves = self.log_dir.join(super::curves::CURVES_FILE);
        if curves.is_file() {
            files.push((curves, super::curves::CURVES_FILE.to_owned()));
        }
        let wanted = std::env::var(LOG_CHECKPOINTS_VAR).is_ok_and(|v| v == "true" || v == "1");
        let dir = self.log_dir.join("checkpoints");
        if wanted && let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".ckpt") {
                    files.push((entry.path(), format!("checkpoints/{name}")));
                }
            }
        }
        files.sort();
        files
    }

    /// Holds `metrics` of `step` for the server, up to [`MAX_HELD`] (beyond: a warning, once).
    fn hold(&mut self, metrics: &BTreeMap<String, f64>, step: u64) {
        let timestamp = now_ms();
        // MLflow takes no NaN or infinity in JSON; a non-finite value is left out.
        let records: Vec<Value> = (metrics.iter())
            .filter(|(_, v)| v.is_finite())
            .map(|(key, value)| json!({"key": key, "value": value, "timestamp": timestamp, "step": step}))
            .collect();
        let room = MAX_HELD.saturating_sub(self.pending.len());
        if records.len() > room && !self.dropped {
            self.dropped = true;
            eprintln!(
                "warning: MLflow logger: {MAX_HELD} metrics are held for the server; later ones are only in {}",
                self.log_dir.join(super::METRICS_FILE).display()
            );
        }
        self.pending.extend(records.into_iter().take(room));
    }

    /// Uploads the artifacts and marks the run FINISHED (or FAILED).
    fn end_run(&mut self, success: bool) -> anyhow::Result<()> {
        let run_id = self.remote()?.run_id.clone();
        for (file, name) in self.artifacts() {
            self.upload(&file, &name)
                .with_context(|| format!("uploading {name}"))?;
        }
        let status = if success { "FINISHED" } else { "FAILED" };
        let body = json!({"run_id": run_id, "status": status, "end_time": now_ms()});
        self.post("runs/update", body).map(drop)
    }

    /// Sends a run's local copy in `log_dir` (`hparams.yaml`, `metrics.csv`, and what an entry
    /// point's end uploads) to the server `MLFLOW_TRACKING_URI` names, as a FINISHED run named
    /// after the directory: for a run the server never got. Returns the server's address.
    fn send_run(log_dir: &Path) -> anyhow::Result<String> {
        Self::new(log_dir)?.send_copy()
    }

    /// [`send_run`](Self::send_run) by this logger.
    fn send_copy(mut self) -> anyhow::Result<String> {
        let log_dir = self.log_dir.clone();
        let hparams_file = log_dir.join(super::HPARAMS_FILE);
        if hparams_file.is_file() {
            let text = std::fs::read_to_string(&hparams_file)
                .with_context(|| format!("reading {}", hparams_file.display()))?;
            let hparams: Value = serde_yaml::from_str(&text)
                .with_context(|| format!("reading {}", hparams_file.display()))?;
            self.tags = tags(&hparams);
            self.pending_params = params(&hparams);
        }
        for (step, metrics) in super::read_rows(&log_dir.join(super::METRICS_FILE))? {
            self.hold(&metrics, step);
        }
        self.send_held()?;
        self.end_run(true)?;
        Ok(self.connection.shown())
    }
}

/// A response's JSON, or an error naming the endpoint and the server's message.
fn read(response: Result<ureq::Response, ureq::Error>, endpoint: &str) -> anyhow::Result<Value> {
    match response {
        Ok(response) => Ok(response.into_json().unwrap_or(Value::Null)),
        Err(ureq::Error::Status(code, response)) => {
            let message = response.into_string().unwrap_or_default();
            Err(anyhow!("{endpoint}: HTTP {code}: {message}"))
        }
        Err(e) => Err(anyhow!("{endpoint}: {e}")),
    }
}

fn id(value: &Value) -> anyhow::Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .context("the server's answer has no id")
}

/// `hparams` flattened to MLflow params: `model.lr` = `0.001`, lists and tables as JSON text.
fn params(hparams: &Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, value) in map {
                    let key = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&key, value, out);
                }
            }
            Value::String(s) => out.push((prefix.to_owned(), s.clone())),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", hparams, &mut out);
    out
}

/// The run's tags from the plan in `hparams`: accelerator, strategy and precision.
fn tags(hparams: &Value) -> Vec<Value> {
    let plan = &hparams["plan"];
    ["accelerator", "strategy", "precision"]
        .iter()
        .filter_map(|key| {
            let value = plan.get(*key)?;
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            Some(json!({"key": format!("ember.{key}"), "value": text}))
        })
        .collect()
}

impl Logger for Tracker {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        self.tags = tags(hparams);
        self.pending_params.extend(params(hparams));
        self.sync(false);
        Ok(())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        self.hold(metrics, step);
        if self.pending.len() >= BATCH {
            self.sync(false);
        }
        Ok(())
    }

    fn save(&mut self) -> anyhow::Result<()> {
        self.sync(false);
        Ok(())
    }

    fn finalize(&mut self, success: bool) -> anyhow::Result<()> {
        if !self.sync(true) {
            eprintln!(
                "warning: MLflow logger: the server at {} has not got the whole run; {} keeps it, and `mlflow-upload {}` sends it when the server answers",
                self.connection.shown(),
                self.log_dir.join(super::METRICS_FILE).display(),
                self.log_dir.display()
            );
            return Ok(());
        }
        if let Err(e) = self.end_run(success) {
            eprintln!(
                "warning: MLflow logger: ending the run at {} failed ({e:#}); {} keeps it",
                self.connection.shown(),
                self.log_dir.join(super::METRICS_FILE).display()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
