//! The MLflow logger a run uses: its tracker works on a thread of its own, so a server that is
//! slow, refuses or has gone away never holds up a training step. The training thread only
//! hands over what it logs; `finalize` waits for the tracker to send what it holds (or give up
//! on it, with its warning) and end the run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use serde_json::Value;

use super::Tracker;
use crate::loggers::Logger;

/// What the training thread hands the tracker.
enum Message {
    Hyperparams(Value),
    Metrics(BTreeMap<String, f64>, u64),
    Save,
}

/// Logs to an MLflow tracking server (`--trainer.logger=mlflow`; docs/trainer.md, Loggers).
pub struct MlflowLogger {
    /// The channel to the tracker's thread, and the thread, which gives the tracker back.
    worker: Option<(Sender<Message>, JoinHandle<Tracker>)>,
}

/// Starts `tracker` on a thread of its own, handling what the channel brings until it closes.
fn start(mut tracker: Tracker) -> anyhow::Result<(Sender<Message>, JoinHandle<Tracker>)> {
    let (sender, messages) = channel();
    let handle = std::thread::Builder::new()
        .name("mlflow-logger".into())
        .spawn(move || {
            // Errors are the tracker's own warnings; it goes on with what it holds.
            for message in messages {
                let _ = match message {
                    Message::Hyperparams(hparams) => tracker.log_hyperparams(&hparams),
                    Message::Metrics(metrics, step) => tracker.log_metrics(&metrics, step),
                    Message::Save => tracker.save(),
                };
            }
            tracker
        })?;
    Ok((sender, handle))
}

impl MlflowLogger {
    /// A logger for the run whose files are in `log_dir`, to the server `MLFLOW_TRACKING_URI`
    /// names (an `http://` or `https://` URL; anything else is an error naming the variable).
    pub fn new(log_dir: &Path) -> anyhow::Result<Self> {
        Self::tracking(Tracker::new(log_dir)?)
    }

    /// A logger driving `tracker` on a thread of its own.
    pub(super) fn tracking(tracker: Tracker) -> anyhow::Result<Self> {
        Ok(Self {
            worker: Some(start(tracker)?),
        })
    }

    /// Sends a run's local copy in `log_dir` (`hparams.yaml`, `metrics.csv`, and what an entry
    /// point's end uploads) to the server `MLFLOW_TRACKING_URI` names, as a FINISHED run named
    /// after the directory: for a run the server never got. Returns the server's address.
    pub fn send_run(log_dir: &Path) -> anyhow::Result<String> {
        Tracker::send_run(log_dir)
    }

    fn send(&self, message: Message) {
        if let Some((sender, _)) = &self.worker {
            // The tracker's thread ends only when this logger closes the channel.
            let _ = sender.send(message);
        }
    }

    /// Closes the channel and takes the tracker back once it has handled everything sent.
    fn stop(&mut self) -> anyhow::Result<Option<Tracker>> {
        let Some((sender, handle)) = self.worker.take() else {
            return Ok(None);
        };
        drop(sender);
        match handle.join() {
            Ok(tracker) => Ok(Some(tracker)),
            Err(_) => anyhow::bail!("the MLflow logger's thread panicked"),
        }
    }
}

impl Logger for MlflowLogger {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        self.send(Message::Hyperparams(hparams.clone()));
        Ok(())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        self.send(Message::Metrics(metrics.clone(), step));
        Ok(())
    }

    fn save(&mut self) -> anyhow::Result<()> {
        self.send(Message::Save);
        Ok(())
    }

    /// Waits for the tracker to handle what it was sent, ends the run on the server, and
    /// starts the tracker again for the Trainer's next entry point.
    fn finalize(&mut self, success: bool) -> anyhow::Result<()> {
        let Some(mut tracker) = self.stop()? else {
            return Ok(());
        };
        let ended = tracker.finalize(success);
        self.worker = Some(start(tracker)?);
        ended
    }
}

impl Drop for MlflowLogger {
    /// A logger dropped without `finalize` lets its tracker finish what it was sent.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
