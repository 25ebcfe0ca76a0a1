//! The digits app with three plugins registered in `main`: `--trainer.strategy=local_sgd`,
//! `--trainer.precision=bf16-static-scale`, and the `renamed` cluster environment.

use std::process::ExitCode;

use custom_plugins::{LocalSgd, RenamedElastic, StaticLossScale};
use digits::Digits;
use digits::data::DigitsData;
use digits::model::ModelConfig;
use ember::{App, AppJob, Cli, Registry, RegistryError, StrategyInfo};

/// Optimizer steps between two weight averages of local SGD.
const LOCAL_SGD_EVERY: u64 = 4;

fn registry() -> Result<Registry<AppJob<Digits>>, RegistryError> {
    ember::registry::<AppJob<Digits>>()
        .register_strategy(
            StrategyInfo::new(
                LocalSgd::NAME,
                "example: data parallel that averages weights every 4 steps instead of gradients",
                true,
            )
            .with_check(LocalSgd::check_plan),
            |parts| Ok(Box::new(LocalSgd::new(parts, LOCAL_SGD_EVERY))),
        )?
        .register_precision(
            StaticLossScale::NAME,
            "example: bf16-mixed with a fixed loss scale of 1024",
            || StaticLossScale {
                scale: 1024.0,
                skipped: 0,
            },
        )?
        .register_cluster_environment(RenamedElastic)
}

fn main() -> ExitCode {
    let registry = match registry() {
        Ok(registry) => registry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    Cli::new(
        "custom_plugins",
        "digits with a strategy, a precision plugin and a cluster environment of its own",
        ModelConfig::default(),
        DigitsData::default(),
    )
    .with_trainer_defaults(Digits::trainer_defaults())
    .run(&registry, AppJob::from)
}
