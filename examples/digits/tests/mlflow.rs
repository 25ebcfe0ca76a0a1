//! `--trainer.logger=mlflow` against a real MLflow tracking server this test starts (`mlflow
//! server` with a SQLite backend, from the venv `scripts/setup.sh --torch` makes), read back with
//! MLflow's own Python client: the hyperparameters as params, every metric of metrics.csv with
//! its step, the plan's tags, curves.png and the checkpoints as artifacts, the run FINISHED. A
//! server that cannot be reached gets a warning; the fit goes on and metrics.csv has everything
//! (a server that comes back mid-run is the logger's own unit test). Over HTTPS (a CA made here
//! with openssl) the logger trusts the CA bundle it is given, refuses the server without it and
//! skips the check when told to; behind MLflow's basic-auth app it logs with a user name and
//! password, and a wrong password is a warning that never shows the password.

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

/// Whether the plain-HTTP server at `port` answers its health check.
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

/// Whether the server at `port` answers its health check over TLS (its certificate unchecked).
fn healthy_over_tls(port: u16) -> bool {
    let url = format!("https://127.0.0.1:{port}/health");
    (Command::new("curl")
        .args(["-skf", "--max-time", "2", &url])
        .output())
    .is_ok_and(|out| out.status.success())
}

/// Starts `mlflow server` in `dir` on a free port; waits up to 120 s for it to answer.
fn start_server(venv: &Path, dir: &Path) -> (Server, u16) {
    start_server_with(venv, dir, &[], &[])
}

/// [`start_server`] with more arguments and variables; over TLS when the arguments hand
/// uvicorn a certificate.
fn start_server_with(
    venv: &Path,
    dir: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Server, u16) {
    let port = free_port();
    let tls = args.iter().any(|a| a.contains("--ssl-certfile"));
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    // The server's own temporary files (its database's init locks) stay in the test's directory.
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let child = Command::new(venv.join("bin/mlflow"))
        .process_group(0)
        .current_dir(dir)
        .env("TMPDIR", &tmp)
        .envs(envs.iter().copied())
        .args(["server", "--host", "127.0.0.1", "--workers", "1"])
        .args(args)
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
    while !(if tls {
        healthy_over_tls(port)
    } else {
        healthy(port)
    }) {
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
    fit_logging(dir, uri, "[csv, mlflow]", &[])
}

/// `digits fit` in `dir` with `--trainer.logger=LOGGERS`, MLflow's server at `uri`, and the
/// variables `envs`.
fn fit_logging(dir: &Path, uri: &str, loggers: &str, envs: &[(&str, &str)]) -> Output {
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
        .envs(envs.iter().copied())
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
    let run = read_back(&venv, &uri, &[]);
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
        let out = fit_logging(dir.path(), &uri, loggers, &[]);
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

/// A CA and a certificate for 127.0.0.1 it signed, made with openssl in `dir`: the CA's and
/// the server's certificate and the server's key. `None` (with a message) without openssl.
fn certificates(dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output();
        out.map(|o| {
            assert!(
                o.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            )
        })
    };
    let ca = [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=ember test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ];
    if openssl(&ca).is_err() {
        eprintln!("skipped: openssl is not installed");
        return None;
    }
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ])
    .unwrap();
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ])
    .unwrap();
    Some((
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    ))
}

/// The run MLflow's client reads from the server at `uri`, with the variables `envs`.
fn read_back(venv: &Path, uri: &str, envs: &[(&str, &str)]) -> serde_json::Value {
    let read = Command::new(venv.join("bin/python"))
        .args(["-c", READ_BACK, uri])
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    serde_json::from_slice(&read.stdout).unwrap()
}

#[test]
fn over_https_the_logger_trusts_the_ca_it_is_given_and_refuses_a_server_it_cannot_check() {
    let Some(venv) = mlflow_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let Some((ca, cert, key)) = certificates(dir.path()) else {
        return;
    };
    let tls = format!(
        "--ssl-certfile={} --ssl-keyfile={}",
        cert.display(),
        key.display()
    );
    let (_server, port) = start_server_with(&venv, dir.path(), &["--uvicorn-opts", &tls], &[]);
    let uri = format!("https://127.0.0.1:{port}");
    let ca = ca.display().to_string();
    let trusted = [("MLFLOW_TRACKING_SERVER_CERT_PATH", ca.as_str())];
    let out = fit_logging(dir.path(), &uri, "[csv, mlflow]", &trusted);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("MLflow logger"), "no warning: {stderr}");
    let run = read_back(&venv, &uri, &trusted);
    assert_eq!(
        (run["status"].as_str(), run["name"].as_str()),
        (Some("FINISHED"), Some("version_0"))
    );

    // Without the CA the server's certificate cannot be checked: a warning, the fit goes on.
    let out = fit_logging(dir.path(), &uri, "[csv, mlflow]", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: MLflow logger: the server at https://127.0.0.1")
            && stderr.contains("certificate"),
        "{stderr}"
    );

    // Told not to check, it logs (as MLflow's client does with the same variable).
    let insecure = [("MLFLOW_TRACKING_INSECURE_TLS", "true")];
    let out = fit_logging(dir.path(), &uri, "[csv, mlflow]", &insecure);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("MLflow logger"),
        "{stderr}"
    );
}

#[test]
fn behind_basic_auth_the_logger_logs_with_a_password_that_shows_nowhere() {
    let Some(venv) = mlflow_venv() else { return };
    let dir = tempfile::tempdir().unwrap();
    let password = "s3cret-Pa55word-for-ember";
    let server_env = [
        ("MLFLOW_AUTH_ADMIN_PASSWORD", password),
        ("MLFLOW_FLASK_SERVER_SECRET_KEY", "ember-test"),
    ];
    let (_server, port) = start_server_with(
        &venv,
        dir.path(),
        &["--app-name", "basic-auth"],
        &server_env,
    );
    let uri = format!("http://127.0.0.1:{port}");
    let user = [
        ("MLFLOW_TRACKING_USERNAME", "admin"),
        ("MLFLOW_TRACKING_PASSWORD", password),
    ];
    let out = fit_logging(dir.path(), &uri, "[csv, mlflow]", &user);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("MLflow logger"), "no warning: {stderr}");
    let run = read_back(&venv, &uri, &user);
    assert_eq!(run["status"], "FINISHED");

    let wrong = [
        ("MLFLOW_TRACKING_USERNAME", "admin"),
        ("MLFLOW_TRACKING_PASSWORD", "not-it-0000"),
    ];
    let out = fit_logging(dir.path(), &uri, "[csv, mlflow]", &wrong);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: MLflow logger") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("not-it-0000") && !stderr.contains(password),
        "{stderr}"
    );
    // Nothing the runs wrote holds either password.
    let mut files = vec![dir.path().join("lightning_logs")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            for secret in [password, "not-it-0000"] {
                let found = bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
                assert!(!found, "{} holds a password", path.display());
            }
        }
    }
}
