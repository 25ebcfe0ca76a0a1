//! `--trainer.logger=mlflow` against a real MLflow tracking server this test starts (`mlflow
//! server` with a SQLite backend, from the venv `scripts/setup.sh --torch` makes), read back with
//! MLflow's own Python client: the hyperparameters as params, every metric of metrics.csv with
//! its step, the plan's tags, curves.png and the checkpoints as artifacts, the run FINISHED. A
//! server that cannot be reached gets a warning; the fit goes on and metrics.csv has everything
//! (a server that comes back mid-run is the logger's own unit test).

// Digits trains on cpu in these tests whatever backend it is built with: the matrix's cpu row
// runs them, and a backend row (digits built with that backend's feature) would only repeat them.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The venv with MLflow, when set up.
fn mlflow_venv() -> Option<PathBuf> {
    let venv = std::env::var_os("EMBER_MLFLOW_VENV").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/ember-mlflow/venv")
        },
        PathBuf::from,
    );
    if venv.join("bin/mlflow").is_file() {
        Some(venv)
    } else {
        eprintln!("skipped: MLflow is not installed (scripts/setup.sh --torch installs it)");
        None
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A tracking server, stopped when dropped: `mlflow server` starts uvicorn and a job consumer
/// as processes of their own, so the whole process group it leads is killed (killing the
/// `mlflow` process alone would leave them running).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// Whether the server at `port` answers its health check.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.")
        && answer.contains(" 200 ")
}

/// Starts `mlflow server` in `dir` on a free port; waits up to 120 s for it to answer.
fn start_server(venv: &Path, dir: &Path) -> (Server, u16) {
    let port = free_port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(venv.join("bin/mlflow"))
        .process_group(0)
        .args(["server", "--host", "127.0.0.1", "--workers", "1"])
        .args(["--port", &port.to_string()])
        .arg("--backend-store-uri")
        .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
        .arg("--artifacts-destination")
        .arg(dir.join("artifacts"))
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let server = Server(child);
    let started = Instant::now();
    while !healthy(port) {
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no server: {log}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    (server, port)
}

/// `digits fit` in `dir` logging to `uri` (and to csv).
fn fit(dir: &Path, uri: &str) -> Output {
    fit_logging(dir, uri, "[csv, mlflow]")
}

/// `digits fit` in `dir` with `--trainer.logger=LOGGERS`, MLflow's server at `uri`.
fn fit_logging(dir: &Path, uri: &str, loggers: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.max_epochs=2",
            "--trainer.log_every_n_steps=5",
            &format!("--trainer.logger={loggers}"),
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ])
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("MLFLOW_TRACKING_URI", uri)
        .env("MLFLOW_EXPERIMENT_NAME", "ember-test")
        .env("EMBER_MLFLOW_LOG_CHECKPOINTS", "true")
        .output()
        .unwrap()
}

/// Every value of `metric` in metrics.csv by step.
fn csv_values(log_dir: &Path, metric: &str) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(log_dir.join("metrics.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header.iter().position(|h| *h == metric).unwrap();
    lines
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            let value = cells.get(column).filter(|c| !c.is_empty())?;
            Some((cells[0].parse().ok()?, value.parse().ok()?))
        })
        .collect()
}

/// What MLflow's client reads of the experiment's only run, as JSON.
const READ_BACK: &str = r#"
import json, sys
from mlflow.tracking import MlflowClient
client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name("ember-test")
[run] = client.search_runs([experiment.experiment_id])
history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
           for key in run.data.metrics}
artifacts = [a.path for a in client.list_artifacts(run.info.run_id)]
artifacts += [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
print(json.dumps({"status": run.info.status, "name": run.info.run_name,
                  "params": run.data.params, "tags": run.data.tags,
                  "history": history, "artifacts": artifacts}))
"#;

#[test]
fn a_fit_logs_its_run_to_a_real_tracking_server() {
    let Some(venv) = mlflow_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_server(&venv, dir.path());
    let uri = format!("http://127.0.0.1:{port}");
    let out = fit(dir.path(), &uri);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("MLflow logger"), "no warning: {stderr}");
    let read = Command::new(venv.join("bin/python"))
        .args(["-c", READ_BACK, &uri])
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let run: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(run["status"], "FINISHED");
    assert_eq!(run["name"], "version_0");
    assert_eq!(run["params"]["model.lr"], "0.001");
    assert_eq!(run["params"]["trainer.max_epochs"], "2");
    for (tag, value) in [
        ("accelerator", "cpu"),
        ("strategy", "single_device"),
        ("precision", "32-true"),
    ] {
        assert_eq!(
            run["tags"][format!("ember.{tag}")],
            value,
            "{}",
            run["tags"]
        );
    }
    let log_dir = dir.path().join("lightning_logs/version_0");
    for metric in ["val_loss", "val_acc", "train_loss"] {
        let logged: Vec<(u64, f64)> = serde_json::from_value(run["history"][metric].clone())
            .unwrap_or_else(|e| panic!("{metric}: {e}: {}", run["history"]));
        let csv = csv_values(&log_dir, metric);
        let steps = |v: &[(u64, f64)]| v.iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(steps(&logged), steps(&csv), "{metric}: every step");
        // metrics.csv's text and MLflow's doubles may differ in the last bit.
        let close = logged
            .iter()
            .zip(&csv)
            .all(|(a, b)| (a.1 - b.1).abs() <= 1e-15 * b.1.abs());
        assert!(close, "{metric}: {logged:?} vs {csv:?}");
    }
    let artifacts: Vec<String> = serde_json::from_value(run["artifacts"].clone()).unwrap();
    assert!(
        artifacts.contains(&"curves.png".to_owned()),
        "{artifacts:?}"
    );
    assert!(
        artifacts
            .iter()
            .any(|a| a.starts_with("checkpoints/") && a.ends_with(".ckpt")),
        "{artifacts:?}"
    );
}

/// A server that never answers: one warning when it first fails and one when the run ends,
/// each naming the local copy; the fit goes on, and metrics.csv has everything, also when
/// mlflow is the run's only logger (the csv logger then comes with it).
#[test]
fn an_unreachable_server_is_a_warning_and_nothing_local_is_lost() {
    for loggers in ["[csv, mlflow]", "mlflow"] {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("http://127.0.0.1:{}", free_port());
        let out = fit_logging(dir.path(), &uri, loggers);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{loggers}: {stderr}");
        let log_dir = dir.path().join("lightning_logs/version_0");
        let copy = format!(
            "{} keeps",
            Path::new("./lightning_logs/version_0/metrics.csv").display()
        );
        let warnings: Vec<&str> = (stderr.lines())
            .filter(|l| l.starts_with("warning: MLflow logger"))
            .collect();
        assert_eq!(warnings.len(), 2, "{loggers}: {stderr}");
        assert!(warnings[0].contains("tries again"), "{loggers}: {stderr}");
        assert!(
            warnings[1].contains("has not got the whole run"),
            "{loggers}: {stderr}"
        );
        assert!(
            warnings.iter().all(|w| w.contains(&copy)),
            "{loggers}: {stderr}"
        );
        let epochs: Vec<u64> = csv_values(&log_dir, "val_loss")
            .iter()
            .map(|v| v.0)
            .collect();
        assert_eq!(
            epochs,
            [22, 45],
            "{loggers}: both epochs' validation in metrics.csv"
        );
        assert!(log_dir.join("hparams.yaml").is_file(), "{loggers}");
        assert!(log_dir.join("curves.png").is_file(), "{loggers}");
    }
}

#[test]
fn a_tracking_uri_that_is_not_http_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = fit(dir.path(), "file:./mlruns");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--trainer.logger") && stderr.contains("file:./mlruns"),
        "{stderr}"
    );
}
