//! `--trainer.logger=mlflow`: a run on an MLflow tracking server through its REST API
//! (`/api/2.0/mlflow/...`), as Lightning's `MLFlowLogger` records one: the hyperparameters as
//! params, every metric with its step, tags for the accelerator, strategy and precision, and
//! when an entry point ends `curves.png` (and, with `EMBER_MLFLOW_LOG_CHECKPOINTS=true`, the
//! checkpoints) as artifacts through the server's artifact proxy.
//!
//! The server is `MLFLOW_TRACKING_URI` (`http://host:port`; plain HTTP only), the experiment
//! `MLFLOW_EXPERIMENT_NAME` (default `lightning_logs`, as Lightning's). A server that cannot be
//! reached or refuses a request gets one warning; the run goes on without it, and the local
//! loggers (`metrics.csv`) keep everything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

use super::Logger;

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

/// The run on the server, once created.
struct Remote {
    run_id: String,
    /// Where the artifact proxy keeps this run's artifacts (`<experiment>/<run>/artifacts`).
    artifact_path: Option<String>,
}

/// Logs to an MLflow tracking server.
pub struct MlflowLogger {
    base: String,
    experiment: String,
    run_name: String,
    log_dir: PathBuf,
    agent: ureq::Agent,
    remote: Option<Remote>,
    /// Metrics not sent yet.
    pending: Vec<Value>,
    /// Set after the first failure: nothing more is sent.
    gave_up: bool,
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since.as_millis() as u64
}

impl MlflowLogger {
    /// A logger for the run whose files are in `log_dir`, to the server `MLFLOW_TRACKING_URI`
    /// names (an `http://` URL; anything else is an error naming the variable).
    pub fn new(log_dir: &Path) -> anyhow::Result<Self> {
        Self::to(
            &std::env::var(TRACKING_URI_VAR).unwrap_or_default(),
            log_dir,
        )
    }

    /// A logger to the server at `uri`.
    fn to(uri: &str, log_dir: &Path) -> anyhow::Result<Self> {
        if !uri.starts_with("http://") {
            // Bad input: a flag error (exit 2) naming the logger, the variable's value and what
            // is allowed.
            return Err(crate::error::FlagError::new(
                "--trainer.logger",
                "mlflow",
                format!(
                    "{TRACKING_URI_VAR}=http://HOST:PORT, an MLflow tracking server over plain HTTP (got `{uri}`; for https, a local proxy in front of the server)"
                ),
            )
            .into());
        }
        let experiment = std::env::var(EXPERIMENT_VAR).unwrap_or_else(|_| "lightning_logs".into());
        let run_name = (log_dir.file_name())
            .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
        Ok(Self {
            base: uri.trim_end_matches('/').to_owned(),
            experiment,
            run_name,
            log_dir: log_dir.to_owned(),
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(10))
                .build(),
            remote: None,
            pending: Vec::new(),
            gave_up: false,
        })
    }

    fn url(&self, endpoint: &str) -> String {
        format!("{}/api/2.0/mlflow/{endpoint}", self.base)
    }

    fn post(&self, endpoint: &str, body: Value) -> anyhow::Result<Value> {
        let response = self.agent.post(&self.url(endpoint)).send_json(body);
        read(response, endpoint)
    }

    /// The experiment's id, made if it does not exist.
    fn experiment_id(&self) -> anyhow::Result<String> {
        let url = self.url("experiments/get-by-name");
        let found = self
            .agent
            .get(&url)
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
    fn remote(&mut self, tags: Vec<Value>) -> anyhow::Result<&Remote> {
        if self.remote.is_none() {
            let experiment_id = self.experiment_id()?;
            let mut tags = tags;
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

    /// Runs `request` unless the server failed before; a failure warns once and stops the
    /// logger (the run goes on).
    fn guarded(&mut self, what: &str, request: impl FnOnce(&mut Self) -> anyhow::Result<()>) {
        if self.gave_up {
            return;
        }
        if let Err(e) = request(self) {
            self.gave_up = true;
            eprintln!(
                "warning: MLflow logger: {what} at {} failed ({e:#}); training goes on without it, and the run's other loggers keep everything",
                self.base
            );
        }
    }

    /// Sends the pending metrics.
    fn flush(&mut self) -> anyhow::Result<()> {
        while !self.pending.is_empty() {
            let run_id = self.remote(Vec::new())?.run_id.clone();
            let n = self.pending.len().min(BATCH);
            let metrics: Vec<Value> = self.pending.drain(..n).collect();
            self.post(
                "runs/log-batch",
                json!({"run_id": run_id, "metrics": metrics}),
            )?;
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
        let url = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{path}/{name}",
            self.base
        );
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let response = self.agent.put(&url).send_bytes(&bytes);
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

impl Logger for MlflowLogger {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        let (params, tags) = (params(hparams), tags(hparams));
        self.guarded("logging the hyperparameters", |me| {
            let run_id = me.remote(tags)?.run_id.clone();
            for chunk in params.chunks(PARAMS_PER_BATCH) {
                let params: Vec<Value> = chunk
                    .iter()
                    .map(|(key, value)| json!({"key": key, "value": value}))
                    .collect();
                me.post(
                    "runs/log-batch",
                    json!({"run_id": run_id, "params": params}),
                )?;
            }
            Ok(())
        });
        Ok(())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        if self.gave_up {
            return Ok(());
        }
        let timestamp = now_ms();
        // MLflow takes no NaN or infinity in JSON; a non-finite value is left out.
        let finite = metrics.iter().filter(|(_, v)| v.is_finite());
        self.pending.extend(finite.map(|(key, value)| {
            json!({"key": key, "value": value, "timestamp": timestamp, "step": step})
        }));
        if self.pending.len() >= BATCH {
            self.guarded("logging metrics", Self::flush);
        }
        Ok(())
    }

    fn save(&mut self) -> anyhow::Result<()> {
        self.guarded("logging metrics", Self::flush);
        Ok(())
    }

    fn finalize(&mut self, success: bool) -> anyhow::Result<()> {
        self.guarded("logging metrics", Self::flush);
        self.guarded("uploading artifacts", |me| {
            me.remote(Vec::new())?;
            for (file, name) in me.artifacts() {
                me.upload(&file, &name)?;
            }
            Ok(())
        });
        self.guarded("ending the run", |me| {
            let run_id = me.remote(Vec::new())?.run_id.clone();
            let status = if success { "FINISHED" } else { "FAILED" };
            let body = json!({"run_id": run_id, "status": status, "end_time": now_ms()});
            me.post("runs/update", body).map(drop)
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyperparameters_flatten_to_dotted_params_and_the_plan_gives_tags() {
        let hparams = json!({
            "model": {"lr": 0.001, "hidden": [256, 256]},
            "trainer": {"max_epochs": 3, "callbacks": []},
            "plan": {"accelerator": "cpu", "strategy": "ddp", "precision": "32-true"},
        });
        let params = params(&hparams);
        assert!(params.contains(&("model.lr".into(), "0.001".into())));
        assert!(params.contains(&("model.hidden".into(), "[256,256]".into())));
        assert!(params.contains(&("trainer.callbacks".into(), "[]".into())));
        assert!(params.contains(&("plan.strategy".into(), "ddp".into())));
        let tags = tags(&hparams);
        assert_eq!(tags[1], json!({"key": "ember.strategy", "value": "ddp"}));
    }

    #[test]
    fn a_tracking_uri_is_required() {
        let e = MlflowLogger::to("file:./mlruns", Path::new("version_0"))
            .err()
            .unwrap();
        let e = e.to_string();
        assert!(
            e.contains(TRACKING_URI_VAR) && e.contains("file:./mlruns"),
            "{e}"
        );
        let logger = MlflowLogger::to(
            "http://127.0.0.1:5000/",
            Path::new("lightning_logs/version_3"),
        );
        let logger = logger.unwrap();
        assert_eq!(
            (logger.base.as_str(), logger.run_name.as_str()),
            ("http://127.0.0.1:5000", "version_3")
        );
    }
}
