//! The digits app with plugins of its own, registered by its `App`:
//! `--trainer.strategy=local_sgd`, `--trainer.precision=bf16-static-scale`, the `renamed`
//! cluster environment, the `mirrored` checkpoint IO, the `EpochLine` and `WeightNorm` callbacks
//! and the `jsonl` logger. `main` stays
//! `ember::run`.

use std::process::ExitCode;

use custom_plugins::{
    EpochLine, JsonLines, LocalSgd, LocalSgdArgs, Mirrored, MirroredArgs, RenamedElastic,
    StaticLossScale, StaticLossScaleArgs, WeightNorm,
};
use digits::Digits;
use ember::Precision;
use ember::burn::tensor::backend::AutodiffBackend;
use ember::plugins::{CheckpointIoInfo, PrecisionInfo, StrategyInfo};
use ember::{App, AppJob, Registry, RegistryError, TrainerFlags};

/// Digits under its own name, with the example's plugins.
struct CustomPlugins;

impl App for CustomPlugins {
    const NAME: &'static str = "custom_plugins";
    const ABOUT: &'static str =
        "digits with a strategy, a precision plugin and a cluster environment of its own";
    type ModelConfig = <Digits as App>::ModelConfig;
    type Data = <Digits as App>::Data;
    type Model<B: AutodiffBackend> = <Digits as App>::Model<B>;

    fn model<B: AutodiffBackend>(config: &Self::ModelConfig, device: &B::Device) -> Self::Model<B> {
        Digits::model(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        Digits::trainer_defaults()
    }

    fn register(registry: Registry<AppJob<Self>>) -> Result<Registry<AppJob<Self>>, RegistryError> {
        registry
            .register_strategy(
                StrategyInfo::new(
                    LocalSgd::NAME,
                    "example: data parallel that averages weights every `every` steps (init_args; 4) instead of gradients",
                    true,
                )
                .with_check(LocalSgd::check_plan)
                .with_args::<LocalSgdArgs>(),
                |parts| Ok(Box::new(LocalSgd::from_parts(parts)?)),
            )?
            .register_precision(
                PrecisionInfo::new(
                    StaticLossScale::NAME,
                    "example: bf16-mixed with a fixed loss scale (init_args: scale; 1024)",
                    Precision::Bf16Mixed,
                )
                .with_args::<StaticLossScaleArgs>(),
                StaticLossScale::from_plan,
            )?
            .register_checkpoint_io(
                CheckpointIoInfo::new(
                    Mirrored::NAME,
                    "example: local files, each checkpoint also copied into init_args' dir",
                )
                .with_args::<MirroredArgs>(),
                Mirrored::from_plan,
            )?
            .register_cluster_environment(RenamedElastic)?
            .register_callback(
                EpochLine::NAME,
                "example: a line per training epoch with the metrics init_args names",
                EpochLine::from_args,
            )?
            .register_callback(
                WeightNorm::NAME,
                "example: logs the L2 norm of the weights at the end of every training epoch",
                WeightNorm::from_args,
            )?
            .register_logger(
                JsonLines::NAME,
                "example: every metrics record as a JSON line in metrics.jsonl",
                JsonLines::create,
            )
    }
}

fn main() -> ExitCode {
    ember::run::<CustomPlugins>()
}
