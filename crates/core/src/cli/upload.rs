//! `<app> mlflow-upload LOGDIR`: sends a run's local copy (`hparams.yaml`, `metrics.csv`,
//! `curves.png`) to the MLflow tracking server `MLFLOW_TRACKING_URI` names, for a run whose
//! server could not be reached while it trained.

use std::path::PathBuf;

use clap::{Arg, ArgMatches, Command};

use super::CliOutcome;
use crate::error::FlagError;
use crate::loggers::{METRICS_FILE, MlflowLogger};

/// The subcommand's name.
pub(super) const NAME: &str = "mlflow-upload";

/// The `mlflow-upload` subcommand.
pub(super) fn command() -> Command {
    Command::new(NAME)
        .about("Send a run's metrics.csv and hparams.yaml to the MLflow server MLFLOW_TRACKING_URI names")
        .arg(
            Arg::new("log_dir")
                .value_name("LOGDIR")
                .required(true)
                .value_parser(clap::value_parser!(PathBuf))
                .help("the run's log directory (e.g. lightning_logs/version_0), which holds metrics.csv"),
        )
}

/// Sends the run of the log directory `matches` names.
pub(super) fn run<O>(matches: &ArgMatches) -> CliOutcome<O> {
    let dir = matches
        .get_one::<PathBuf>("log_dir")
        .expect("clap requires LOGDIR");
    if !dir.join(METRICS_FILE).is_file() {
        return CliOutcome::Failed {
            code: 2,
            message: FlagError::new(
                "LOGDIR",
                dir.display().to_string(),
                format!("a run's log directory, which holds {METRICS_FILE}"),
            )
            .to_string(),
        };
    }
    match MlflowLogger::send_run(dir) {
        Ok(server) => CliOutcome::Printed(format!("sent {} to {server}", dir.display())),
        Err(e) => match e.downcast::<FlagError>() {
            Ok(flag) => CliOutcome::Failed {
                code: 2,
                message: flag.to_string(),
            },
            Err(e) => CliOutcome::Failed {
                code: 1,
                message: format!("mlflow-upload {}: {e:#}", dir.display()),
            },
        },
    }
}
