//! `<app> mlflow-upload LOGDIR`: sends a run's local copy (`hparams.yaml`, `metrics.csv`,
//! `curves.png`) to the MLflow tracking server `MLFLOW_TRACKING_URI` names, for a run whose
//! server could not be reached while it trained.

use clap::{ArgMatches, Command};

use super::CliOutcome;
use crate::error::FlagError;
use crate::loggers::MlflowLogger;

/// The subcommand's name.
pub(super) const NAME: &str = "mlflow-upload";

/// The `mlflow-upload` subcommand.
pub(super) fn command() -> Command {
    Command::new(NAME)
        .about("Send a run's metrics.csv and hparams.yaml to the MLflow server MLFLOW_TRACKING_URI names")
        .arg(super::plot::log_dir_arg())
}

/// Sends the run of the log directory `matches` names.
pub(super) fn run<O>(matches: &ArgMatches) -> CliOutcome<O> {
    let dir = match super::plot::log_dir(matches) {
        Ok(dir) => dir,
        Err(refused) => return refused,
    };
    match MlflowLogger::send_run(dir) {
        Ok(server) => CliOutcome::Printed(format!("sent {} to {server}", dir.display())),
        Err(e) => match e.downcast::<FlagError>() {
            Ok(flag) => CliOutcome::bad_input(flag),
            Err(e) => CliOutcome::failed(format!("mlflow-upload {}: {e:#}", dir.display())),
        },
    }
}
