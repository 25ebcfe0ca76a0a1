//! The command line: `<app> fit|validate|test|predict [--config FILE]... [--trainer.KEY=VALUE]...
//! [--model.KEY=VALUE]... [--data.KEY=VALUE]... [--optimizer=CLASS] [--optimizer.KEY=VALUE]...
//! [--lr_scheduler=CLASS] [--lr_scheduler.KEY=VALUE]... [--print-config] [--print-plan]`.
//!
//! Every rejected input ends with one message naming the flag, the value and what is allowed,
//! and exit status 2; nothing is written to disk before the plan is accepted.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::callbacks::{BuiltCallbacks, Callback};
use crate::cluster::Env;
use crate::config::{self, ConfigSources};
use crate::error::{FlagError, list};
use crate::flags::{TrainerFlags, trainer_keys};
use crate::job::Job;
use crate::optim::OptimizerSections;
use crate::plan::{Launcher, Plan};
use crate::registered::build;
use crate::registry::Registry;
use crate::trainer::{AgreedError, signals};
use help::names_help;
use sections::{section, split_section_overrides};
pub(crate) use tree::config_tree;

pub use ember_plan::Stage;

mod help;
mod launch;
mod plot;
mod sections;
mod tree;
mod upload;

/// What a job is built from: the stage and the merged, typed config.
#[derive(Debug, Clone)]
pub struct Invocation<M, D> {
    /// The subcommand.
    pub stage: Stage,
    /// The trainer flags (already turned into the plan the job receives).
    pub trainer: TrainerFlags,
    /// The `model` section.
    pub model: M,
    /// The `data` section.
    pub data: D,
    /// The `optimizer` and `lr_scheduler` sections, read and checked.
    pub optimizers: OptimizerSections,
    /// The callbacks the trainer flags name, built once while planning (which refused any
    /// that cannot be built); a job gives them to the Trainer's builder
    /// ([`TrainerBuilder::callbacks`](crate::trainer::TrainerBuilder::callbacks)).
    pub callbacks: BuiltCallbacks,
}

/// How a CLI invocation ended.
#[derive(Debug)]
pub enum CliOutcome<O> {
    /// Help, `--print-config` or `--print-plan`: text for stdout; exit 0.
    Printed(String),
    /// The job ran and returned this.
    Ran(O),
    /// This process was the local launcher: it started the run's ranks, which ended with
    /// this exit status.
    Launched {
        /// Exit status of the ranks (0: all succeeded).
        code: u8,
    },
    /// A rank of a multi-process run that stopped with every other on an error that rank 0
    /// reports: nothing to print; the exit status.
    Stopped {
        /// Exit status.
        code: u8,
    },
    /// An error: a message for stderr and the exit status (2: bad input, 1: the job failed).
    Failed {
        /// Exit status.
        code: u8,
        /// The message, without the `error: ` prefix.
        message: String,
    },
}

impl<O> CliOutcome<O> {
    fn bad_input(e: FlagError) -> Self {
        CliOutcome::Failed {
            code: 2,
            message: e.to_string(),
        }
    }

    /// The job failed (exit 1) with `message`.
    fn failed(message: String) -> Self {
        CliOutcome::Failed { code: 1, message }
    }
}

/// An application's command line: its name, and the defaults of its `model` and `data` sections.
pub struct Cli<M, D> {
    name: String,
    about: String,
    trainer: TrainerFlags,
    model: M,
    data: D,
}

impl<M, D> Cli<M, D>
where
    M: Serialize + DeserializeOwned,
    D: Serialize + DeserializeOwned,
{
    /// A CLI whose `model` and `data` sections start from these defaults.
    pub fn new(name: &str, about: &str, model: M, data: D) -> Self {
        Self {
            name: name.to_owned(),
            about: about.to_owned(),
            trainer: TrainerFlags::default(),
            model,
            data,
        }
    }

    /// Replaces the trainer defaults (e.g. the app's own `max_epochs`).
    pub fn with_trainer_defaults(mut self, trainer: TrainerFlags) -> Self {
        self.trainer = trainer;
        self
    }

    /// Parses this process's arguments and environment, runs the job, and returns the exit code.
    pub fn run<J: Job>(
        &self,
        registry: &Registry<J>,
        make_job: impl FnOnce(Invocation<M, D>) -> J,
    ) -> ExitCode {
        init_tracing();
        let env: Env = std::env::vars().collect();
        match self.execute(std::env::args(), &env, registry, make_job) {
            CliOutcome::Printed(text) => {
                print!("{text}");
                if !text.ends_with('\n') {
                    println!();
                }
                ExitCode::SUCCESS
            }
            CliOutcome::Ran(_) => ExitCode::SUCCESS,
            CliOutcome::Launched { code } | CliOutcome::Stopped { code } => ExitCode::from(code),
            CliOutcome::Failed { code, message } => {
                eprintln!("error: {message}");
                ExitCode::from(code)
            }
        }
    }

    /// Does everything [`run`](Self::run) does with explicit arguments and environment,
    /// and returns the outcome instead of printing it (warnings still go to stderr).
    pub fn execute<J: Job>(
        &self,
        args: impl IntoIterator<Item = String>,
        env: &Env,
        registry: &Registry<J>,
        make_job: impl FnOnce(Invocation<M, D>) -> J,
    ) -> CliOutcome<J::Output> {
        let sections = OptimizerSections::default();
        let defaults = config_tree(&self.trainer, &self.model, &self.data, &sections);
        let argv: Vec<String> = args.into_iter().collect();
        let (args, section_overrides) = match split_section_overrides(argv.clone()) {
            Ok(split) => split,
            Err(e) => return CliOutcome::bad_input(e),
        };
        let name = self.program_name(argv.first());
        let matches = match self
            .command(&name, registry, &defaults)
            .try_get_matches_from(args)
        {
            Ok(m) => m,
            Err(e) => {
                let text = e.render().to_string();
                return match e.kind() {
                    clap::error::ErrorKind::DisplayHelp
                    | clap::error::ErrorKind::DisplayVersion
                    | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        if e.exit_code() == 0 =>
                    {
                        CliOutcome::Printed(text)
                    }
                    _ => CliOutcome::Failed {
                        code: 2,
                        message: text.trim_start_matches("error: ").trim_end().to_owned(),
                    },
                };
            }
        };
        let Some((sub, sub_matches)) = matches.subcommand() else {
            return CliOutcome::Failed {
                code: 2,
                message: format!(
                    "a subcommand is required: {}",
                    list(Stage::ALL.map(Stage::name))
                ),
            };
        };
        if sub == plot::NAME {
            return plot::run(sub_matches);
        }
        if sub == upload::NAME {
            return upload::run(sub_matches);
        }
        let stage = Stage::ALL
            .into_iter()
            .find(|s| s.name() == sub)
            .unwrap_or(Stage::Fit);
        match self.prepare(sub_matches, section_overrides, &defaults, env, registry) {
            Err(e) => CliOutcome::bad_input(e),
            Ok(Prepared::Printed(text)) => CliOutcome::Printed(text),
            Ok(Prepared::Ready(ready)) => {
                let Ready {
                    trainer,
                    model,
                    data,
                    optimizers,
                    plan,
                    callbacks,
                } = *ready;
                let engine = match (plan.world_size > 1, registry.engine()) {
                    (false, _) => None,
                    (true, Some(engine)) => Some(engine),
                    (true, None) => {
                        return CliOutcome::Failed {
                            code: 2,
                            message: format!(
                                "--trainer.strategy={} runs {} processes, but this program has no distributed engine: \
                                 build it with ember's `mpi` feature (or call Registry::with_engine)",
                                plan.strategy, plan.world_size
                            ),
                        };
                    }
                };
                if let (Some(engine), Launcher::Local { .. }) = (engine, plan.launcher()) {
                    let args = argv.get(1..).unwrap_or_default();
                    return launch::launch(engine, &plan, args, trainer.options.max_restarts);
                }
                if stage == Stage::Fit
                    && let Err(e) = signals::keep_for_fit()
                {
                    return CliOutcome::failed(format!("{e:#}"));
                }
                let timeout = Duration::from_secs_f64(trainer.options.ddp_timeout);
                let collective = match engine.map(|e| e.join(&plan, timeout)).transpose() {
                    Ok(collective) => collective,
                    Err(e) => {
                        let (code, message) = exit_code(&e);
                        return CliOutcome::Failed {
                            code,
                            message: format!("rank {}: {message}", plan.global_rank),
                        };
                    }
                };
                let job = make_job(Invocation {
                    stage,
                    trainer,
                    model,
                    data,
                    optimizers,
                    callbacks: BuiltCallbacks::new(callbacks),
                });
                match registry.run(job, &plan, collective.clone()) {
                    Ok(out) => CliOutcome::Ran(out),
                    // Every rank holds it and none waits for another: rank 0 says it once.
                    Err(e) if e.is::<AgreedError>() => {
                        let agreed = e.downcast::<AgreedError>().expect("is one");
                        let code =
                            engine.map_or(agreed.code, |e| e.stop_together(&plan, agreed.code));
                        match plan.global_rank {
                            0 => CliOutcome::Failed {
                                code,
                                message: agreed.to_string(),
                            },
                            _ => CliOutcome::Stopped { code },
                        }
                    }
                    Err(e) => {
                        // A flag found wrong only once the data is known is still bad input.
                        let (code, message) = exit_code(&e);
                        if let Some(collective) = &collective {
                            // The other ranks would wait for this one in their next collective.
                            eprintln!("error: rank {}: {message}", plan.global_rank);
                            collective.abort(i32::from(code));
                        }
                        CliOutcome::Failed { code, message }
                    }
                }
            }
        }
    }

    fn prepare<J: Job>(
        &self,
        matches: &ArgMatches,
        section_overrides: Vec<(String, String)>,
        defaults: &Value,
        env: &Env,
        registry: &Registry<J>,
    ) -> Result<Prepared<M, D>, FlagError> {
        let mut sources = ConfigSources {
            files: matches
                .get_many::<String>("config")
                .into_iter()
                .flatten()
                .map(Into::into)
                .collect(),
            overrides: Vec::new(),
        };
        for (key, _) in trainer_keys() {
            if let Some(value) = matches
                .get_many::<String>(key)
                .and_then(|mut v| v.next_back())
            {
                sources
                    .overrides
                    .push((format!("trainer.{key}"), value.clone()));
            }
        }
        sources.overrides.extend(section_overrides);
        let mut merged = config::merge(defaults, &sources)?;
        let optimizers = OptimizerSections::from_config(&merged)?;
        // Printed whole, each argument with its value, as the run reads them.
        for (name, section) in tree::optimizer_sections(&optimizers) {
            merged[name] = section;
        }
        if matches.get_flag("print-config") {
            let yaml = serde_yaml::to_string(&merged).map_err(|e| {
                FlagError::new("--print-config", "", format!("cannot print config: {e}"))
            })?;
            return Ok(Prepared::Printed(yaml));
        }
        let trainer = TrainerFlags::from_value(&merged["trainer"])?;
        let callbacks = build::callbacks(&trainer.options.callbacks, registry.plugins())?;
        registry.plugins().logger_names(&trainer.options.logger)?;
        let model = section("model", &merged, defaults)?;
        let data = section("data", &merged, defaults)?;
        let plan = registry.plan(&trainer, env)?;
        for warning in &plan.warnings {
            eprintln!("warning: {warning}");
        }
        if matches.get_flag("print-plan") {
            return Ok(Prepared::Printed(plan.to_json()));
        }
        registry.check_hardware(&plan, env)?;
        Ok(Prepared::Ready(Box::new(Ready {
            trainer,
            model,
            data,
            optimizers,
            plan,
            callbacks,
        })))
    }

    /// The name `--help` shows: the application's, or where it gave none (an [`App`] without
    /// `NAME`) the file name the program was started as.
    ///
    /// [`App`]: crate::app::App
    fn program_name(&self, argv0: Option<&String>) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        argv0
            .map(std::path::Path::new)
            .and_then(|path| path.file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn command<J: Job>(&self, name: &str, registry: &Registry<J>, defaults: &Value) -> Command {
        let catalog = registry.catalog();
        let names = names_help(catalog, defaults);
        let stage_args: Vec<Arg> = [
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .action(ArgAction::Append)
                .help("YAML or TOML config file; repeatable, later files win"),
            Arg::new("print-config")
                .long("print-config")
                .action(ArgAction::SetTrue)
                .help("Print the merged config as YAML and exit"),
            Arg::new("print-plan")
                .long("print-plan")
                .action(ArgAction::SetTrue)
                .help("Print the resolved plan as JSON and exit without training"),
        ]
        .into_iter()
        .chain(trainer_keys().map(|(key, help)| {
            Arg::new(key)
                .long(format!("trainer.{key}"))
                .value_name("VALUE")
                .allow_hyphen_values(true)
                .action(ArgAction::Append)
                .help(help)
        }))
        .collect();
        // The flags live on the subcommands; say where to see them.
        let top = format!(
            "Every subcommand takes --config, --trainer.*, --model.*, --data.*, --optimizer[.*] and --lr_scheduler[.*] flags: `{name} fit --help` lists them.\n\n{names}"
        );
        // The usage lines too (clap would take the file name the program was started as).
        let command = Command::new(name.to_owned()).bin_name(name.to_owned());
        let command = match self.about.as_str() {
            "" => command,
            about => command.about(about.to_owned()),
        };
        command
            .subcommand_required(true)
            .arg_required_else_help(true)
            .after_help(top)
            .subcommands(Stage::ALL.map(|stage| {
                Command::new(stage.name())
                    .about(stage.about())
                    .args(stage_args.clone())
                    .after_help(names.clone())
            }))
            .subcommand(plot::command())
            .subcommand(upload::command())
    }
}

/// The exit status and message of a failed run: 2 for bad input (a [`FlagError`], even one
/// found only after the run started), 1 for anything else.
fn exit_code(e: &anyhow::Error) -> (u8, String) {
    match e.downcast_ref::<FlagError>() {
        Some(flag) => (2, flag.to_string()),
        None => (1, format!("{e:#}")),
    }
}

/// Sends `tracing` events (the text logger's metrics, warnings) to stderr, filtered by
/// `RUST_LOG` (e.g. `ember=info`; default: warnings only), coloured only when stderr is a
/// terminal. A subscriber the application installed first is kept.
fn init_tracing() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::WARN));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .with(filter)
        .try_init();
}

enum Prepared<M, D> {
    Printed(String),
    Ready(Box<Ready<M, D>>),
}

struct Ready<M, D> {
    trainer: TrainerFlags,
    model: M,
    data: D,
    optimizers: OptimizerSections,
    plan: Plan,
    callbacks: Vec<Box<dyn Callback>>,
}
