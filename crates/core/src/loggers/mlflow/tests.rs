//! The logger's requests, checked against a stand-in server that answers as MLflow's REST API
//! does and records what it was sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

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
    let e = Tracker::to("file:./mlruns", Path::new("version_0"), no_var)
        .err()
        .unwrap();
    let e = e.to_string();
    assert!(
        e.contains(TRACKING_URI_VAR) && e.contains("file:./mlruns"),
        "{e}"
    );
    let logger = Tracker::to(
        "http://127.0.0.1:5000/",
        Path::new("lightning_logs/version_3"),
        no_var,
    );
    let logger = logger.unwrap();
    assert_eq!(
        (logger.connection.shown().as_str(), logger.run_name.as_str()),
        ("http://127.0.0.1:5000", "version_3")
    );
}

/// What the stand-in server was sent: each request's path, JSON body and `Authorization`.
type Requests = Arc<Mutex<Vec<(String, Value, Option<String>)>>>;

/// An empty environment.
fn no_var(_: &str) -> Option<String> {
    None
}

/// Answers every request on `listener` as an MLflow server would (one experiment, one run)
/// and records it, until the test ends.
fn serve(listener: TcpListener) -> Requests {
    serve_gated(listener, None)
}

/// [`serve`], holding the first request open until `gate` says to answer it; then `opened`
/// gets whether its client was still waiting for the answer.
fn serve_gated(listener: TcpListener, gate: Option<(Receiver<()>, Sender<bool>)>) -> Requests {
    let requests = Requests::default();
    let seen = Arc::clone(&requests);
    let mut gate = gate;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let mut length = 0;
            let mut authorization = None;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some(n) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap();
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    authorization = Some(value.trim().to_owned());
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let answer = if path.contains("experiments/get-by-name") {
                json!({"experiment": {"experiment_id": "1"}})
            } else if path.ends_with("runs/create") {
                json!({"run": {"info": {"run_id": "r1", "artifact_uri": "mlflow-artifacts:/1/r1/artifacts"}}})
            } else {
                json!({})
            };
            if let Some((release, opened)) = gate.take() {
                release.recv().unwrap();
                stream.set_nonblocking(true).unwrap();
                let waiting = matches!(stream.peek(&mut [0]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                stream.set_nonblocking(false).unwrap();
                opened.send(waiting).unwrap();
            }
            let sent = serde_json::from_slice(&body).unwrap_or(Value::Null);
            seen.lock().unwrap().push((path, sent, authorization));
            let answer = answer.to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                answer.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    requests
}

/// The steps of every metric the server got.
fn steps_sent(requests: &Requests) -> Vec<u64> {
    let requests = requests.lock().unwrap();
    (requests.iter())
        .flat_map(|(_, body, _)| body["metrics"].as_array().cloned().unwrap_or_default())
        .map(|m| m["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_server_that_comes_back_mid_run_gets_what_was_held() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("http://127.0.0.1:{port}");
    let mut logger = Tracker::to(&uri, &dir.path().join("version_0"), no_var).unwrap();
    let loss = |v: f64| BTreeMap::from([("train_loss".to_owned(), v)]);
    // Nothing listens: the run, its params and the first metrics are held.
    let hparams = json!({"model": {"lr": 0.001}, "plan": {"accelerator": "cpu"}});
    logger.log_hyperparams(&hparams).unwrap();
    logger.log_metrics(&loss(2.0), 0).unwrap();
    logger.save().unwrap();
    assert!(logger.failed_once && logger.retry_at.is_some());
    assert_eq!((logger.pending_params.len(), logger.pending.len()), (2, 1));

    // The server is back, but the logger waits out the retry interval.
    let requests = serve(TcpListener::bind(("127.0.0.1", port)).unwrap());
    logger.log_metrics(&loss(1.5), 9).unwrap();
    logger.save().unwrap();
    assert!(requests.lock().unwrap().is_empty(), "tried again too soon");

    // Once it is over, everything held goes, then the rest of the run.
    logger.retry_at = Some(Instant::now());
    logger.save().unwrap();
    assert!(logger.retry_at.is_none() && logger.pending.is_empty());
    logger.log_metrics(&loss(1.0), 19).unwrap();
    logger.finalize(true).unwrap();
    assert_eq!(steps_sent(&requests), [0, 9, 19]);
    let requests = requests.lock().unwrap();
    let paths: Vec<&str> = requests.iter().map(|(p, ..)| p.as_str()).collect();
    assert_eq!(
        paths.iter().filter(|p| p.ends_with("runs/create")).count(),
        1,
        "{paths:?}"
    );
    let params = &requests
        .iter()
        .find(|(_, body, _)| body.get("params").is_some())
        .unwrap()
        .1["params"];
    assert!(
        params
            .as_array()
            .unwrap()
            .contains(&json!({"key": "model.lr", "value": "0.001"})),
        "{params}"
    );
    let (last, ended, _) = requests.last().unwrap();
    assert!(last.ends_with("runs/update"), "{paths:?}");
    assert_eq!(ended["status"], "FINISHED");
}

/// A run the server never got goes up later from its local copy, as the same run would have.
#[test]
fn a_runs_local_copy_is_sent_later() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let requests = serve(listener);
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("version_4");
    std::fs::create_dir(&log_dir).unwrap();
    let mut csv = super::super::CsvLogger::new(&log_dir);
    csv.log_hyperparams(&json!({"model": {"lr": 0.01}}))
        .unwrap();
    for (step, loss) in [(9, 2.0), (19, 1.0)] {
        let metrics = BTreeMap::from([("train_loss".to_owned(), loss), ("epoch".to_owned(), 0.0)]);
        csv.log_metrics(&metrics, step).unwrap();
    }
    csv.save().unwrap();
    let server = Tracker::to(&uri, &log_dir, no_var)
        .unwrap()
        .send_copy()
        .unwrap();
    assert_eq!(server, uri);
    assert_eq!(
        steps_sent(&requests),
        [9, 9, 19, 19],
        "train_loss and epoch each step"
    );
    let requests = requests.lock().unwrap();
    let created = &requests
        .iter()
        .find(|(p, ..)| p.ends_with("runs/create"))
        .unwrap()
        .1;
    assert_eq!(created["run_name"], "version_4");
    assert!(
        requests
            .iter()
            .any(|(_, b, _)| b["params"][0] == json!({"key": "model.lr", "value": "0.01"}))
    );
    assert_eq!(requests.last().unwrap().1["status"], "FINISHED");
}

/// Every request carries the credentials MLflow's variables give (a token before a user name),
/// and messages show the server without a `user:password@`.
#[test]
fn credentials_go_in_every_requests_header_and_nowhere_else() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let requests = serve(listener);
    let dir = tempfile::tempdir().unwrap();
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            (pairs.iter())
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let runs: [(&[(&str, &str)], &str); 3] = [
        (
            &[
                ("MLFLOW_TRACKING_TOKEN", "t0k3n"),
                ("MLFLOW_TRACKING_USERNAME", "u"),
            ],
            "Bearer t0k3n",
        ),
        (
            &[
                ("MLFLOW_TRACKING_USERNAME", "ada"),
                ("MLFLOW_TRACKING_PASSWORD", "s3cret"),
            ],
            // base64("ada:s3cret")
            "Basic YWRhOnMzY3JldA==",
        ),
        (&[("MLFLOW_TRACKING_USERNAME", "ada")], "Basic YWRhOg=="),
    ];
    for (i, (pairs, expected)) in runs.into_iter().enumerate() {
        requests.lock().unwrap().clear();
        let uri = format!("http://{address}");
        let log_dir = dir.path().join(format!("version_{i}"));
        let mut logger = Tracker::to(&uri, &log_dir, env(pairs)).unwrap();
        logger
            .log_metrics(&BTreeMap::from([("loss".to_owned(), 1.0)]), 1)
            .unwrap();
        logger.finalize(true).unwrap();
        let requests = requests.lock().unwrap();
        assert!(requests.len() >= 3, "{}", requests.len());
        for (path, _, authorization) in requests.iter() {
            assert_eq!(authorization.as_deref(), Some(expected), "{path}");
        }
    }
    let logger = Tracker::to(
        "https://ada:s3cret@mlflow.example:5000/x",
        Path::new("v"),
        no_var,
    )
    .unwrap();
    assert_eq!(logger.connection.shown(), "https://mlflow.example:5000/x");
}

#[test]
fn a_ca_bundle_that_cannot_be_read_is_an_error_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    for content in [None, Some("not a certificate")] {
        if let Some(text) = content {
            std::fs::write(&bundle, text).unwrap();
        }
        let path = bundle.display().to_string();
        let var = |name: &str| (name == "MLFLOW_TRACKING_SERVER_CERT_PATH").then(|| path.clone());
        let e = Tracker::to("https://127.0.0.1:1", Path::new("v"), var)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("MLFLOW_TRACKING_SERVER_CERT_PATH") && e.contains("ca.pem"),
            "{e}"
        );
    }
}

/// The training thread hands the logger what it logs and goes on: while the server holds the
/// run's first request open, hyperparameters, metrics and saves return at once; the request is
/// still waiting when the server answers; `finalize` waits for everything to go.
#[test]
fn logging_never_waits_for_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let (release, gate) = channel();
    let (opened, was_open) = channel();
    let requests = serve_gated(listener, Some((gate, opened)));
    let dir = tempfile::tempdir().unwrap();
    let tracker = Tracker::to(&uri, &dir.path().join("version_0"), no_var).unwrap();
    let mut logger = MlflowLogger::tracking(tracker).unwrap();
    logger
        .log_hyperparams(&json!({"model": {"lr": 0.1}}))
        .unwrap();
    for step in 0..3 {
        let metrics = BTreeMap::from([("loss".to_owned(), 1.0 / (step + 1) as f64)]);
        logger.log_metrics(&metrics, step).unwrap();
        logger.save().unwrap();
    }
    release.send(()).unwrap();
    assert!(
        was_open.recv().unwrap(),
        "the client gave up before the server answered"
    );
    logger.finalize(true).unwrap();
    assert_eq!(steps_sent(&requests), [0, 1, 2]);
    let requests = requests.lock().unwrap();
    assert!(requests.last().unwrap().0.ends_with("runs/update"));
}
