//! `<app> plot LOGDIR`: draws `curves.png` from a run's `metrics.csv` again (fit draws it when
//! it ends; this redraws it for a run that was stopped, or after the file was edited).

use std::path::PathBuf;

use clap::{Arg, ArgMatches, Command};

use super::CliOutcome;
use crate::error::FlagError;
use crate::loggers::METRICS_FILE;
use crate::loggers::curves::{CURVES_FILE, write};

/// The subcommand's name.
pub(super) const NAME: &str = "plot";

/// The `plot` subcommand.
pub(super) fn command() -> Command {
    Command::new(NAME)
        .about("Draw curves.png from a run's metrics.csv (e.g. lightning_logs/version_0)")
        .arg(log_dir_arg())
}

/// The `LOGDIR` argument of the subcommands that read a run's log directory.
pub(super) fn log_dir_arg() -> Arg {
    Arg::new("log_dir")
        .value_name("LOGDIR")
        .required(true)
        .value_parser(clap::value_parser!(PathBuf))
        .help("the run's log directory, which holds metrics.csv")
}

/// The log directory `matches` names, or the refusal (exit 2) of one without metrics.csv.
pub(super) fn log_dir<O>(matches: &ArgMatches) -> Result<&PathBuf, CliOutcome<O>> {
    let dir = matches
        .get_one::<PathBuf>("log_dir")
        .expect("clap requires LOGDIR");
    if dir.join(METRICS_FILE).is_file() {
        return Ok(dir);
    }
    Err(CliOutcome::bad_input(FlagError::new(
        "LOGDIR",
        dir.display().to_string(),
        format!("a run's log directory, which holds {METRICS_FILE}"),
    )))
}

/// Draws the curves of the log directory `matches` names.
pub(super) fn run<O>(matches: &ArgMatches) -> CliOutcome<O> {
    let dir = match log_dir(matches) {
        Ok(dir) => dir,
        Err(refused) => return refused,
    };
    match write(dir) {
        Ok(()) => CliOutcome::Printed(format!("wrote {}", dir.join(CURVES_FILE).display())),
        Err(e) => CliOutcome::Failed {
            code: 1,
            message: format!("plot {}: {e:#}", dir.display()),
        },
    }
}
