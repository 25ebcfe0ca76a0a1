//! ember's own strategies, precision plugins, callbacks and loggers, each registered once,
//! through the calls an application's plugins go through.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Plugins, RegistryError};
use crate::callbacks::{
    BackboneFinetuning, DeviceStatsMonitor, EMAWeightAveraging, EarlyStopping, JsonLinesWriter,
    LearningRateMonitor, ModelCheckpoint, OnExceptionCheckpoint, ProgressBar,
    StochasticWeightAveraging, ThroughputMonitor, Timer,
};
use crate::catalog::PrecisionInfo;
use crate::loggers::{CsvLogger, MlflowLogger, TensorBoardLogger};
use crate::options::init_args;
use crate::plugins::ddp::Ddp;
use crate::plugins::ddp_sharded::DdpSharded;
use crate::plugins::precision::{MixedPrecision, TruePrecision};
use crate::plugins::scaler::GradScaler;
use crate::plugins::strategy::SingleDevice;
use crate::plugins::xla_strategy::XlaStrategy;
use ember_plan::precision::Precision;
use ember_plan::strategy::{DDP, DDP_SHARDED, SINGLE_DEVICE, StrategyInfo, XLA};

impl Plugins {
    /// ember's own plugins: the strategies, the plugins of the six named precisions, the
    /// callbacks and the loggers. A [`Registry`](crate::Registry) starts from them; a program
    /// that builds its Trainer without one gets them too.
    pub fn builtin() -> Self {
        register_builtins(Self::empty()).expect("the built-in plugins' names are distinct")
    }
}

fn register_builtins(plugins: Plugins) -> Result<Plugins, RegistryError> {
    let plugins = strategies(plugins)?;
    let plugins = precisions(plugins)?;
    let plugins = callbacks(plugins)?;
    loggers(plugins)
}

fn strategies(plugins: Plugins) -> Result<Plugins, RegistryError> {
    plugins
        .register_strategy(
            StrategyInfo::new(SINGLE_DEVICE, "one process on one device", false),
            |parts| Ok(Box::new(SingleDevice::new(parts))),
        )?
        .register_strategy(
            StrategyInfo::new(
                DDP,
                "distributed data parallel: one process per device, gradients all-reduced",
                true,
            ),
            |parts| Ok(Box::new(Ddp::new(parts))),
        )?
        .register_strategy(
            StrategyInfo::new(
                DDP_SHARDED,
                "sharded data parallel: ddp with the optimizer state and gradients partitioned over the ranks",
                true,
            ),
            |parts| Ok(Box::new(DdpSharded::new(parts))),
        )?
        .register_strategy(
            StrategyInfo::new(
                XLA,
                "one process drives every device as one XLA SPMD program, each device a share of the batch (accelerator xla)",
                true,
            )
            .per_node()
            .with_check(XlaStrategy::check_plan),
            |parts| Ok(Box::new(XlaStrategy::new(parts))),
        )
}

fn precisions(plugins: Plugins) -> Result<Plugins, RegistryError> {
    let info = |precision: Precision, description| {
        PrecisionInfo::new(precision.name(), description, precision)
    };
    let true_precisions = [
        (Precision::F32True, "everything in f32"),
        (Precision::F64True, "everything in f64"),
        (Precision::F16True, "everything in f16"),
        (Precision::Bf16True, "everything in bf16"),
    ];
    let mut plugins = plugins;
    for (precision, description) in true_precisions {
        plugins = plugins.register_precision(info(precision, description), move |_| {
            Ok(TruePrecision(precision))
        })?;
    }
    plugins
        .register_precision(
            info(
                Precision::F16Mixed,
                "f32 master weights, f16 compute, dynamic loss scaling",
            ),
            |_| Ok(MixedPrecision::f16(GradScaler::default())),
        )?
        .register_precision(
            info(Precision::Bf16Mixed, "f32 master weights, bf16 compute"),
            |_| Ok(MixedPrecision::bf16()),
        )
}

/// A built-in callback's settings from its `init_args`: an unknown or mistyped key is a plan
/// error naming the callback.
fn settings<T: DeserializeOwned>(name: &str, args: &Value) -> anyhow::Result<T> {
    Ok(init_args(name, args)?)
}

fn callbacks(plugins: Plugins) -> Result<Plugins, RegistryError> {
    plugins
        .register_callback(
            "ModelCheckpoint",
            "save checkpoints (monitor, mode, save_top_k, save_last, every_n_epochs, dirpath, filename, save_on_exception)",
            |args| Ok(ModelCheckpoint::new(settings("ModelCheckpoint", args)?)),
        )?
        .register_callback(
            "EarlyStopping",
            "stop when a metric stops improving (monitor, mode, patience, min_delta, check_finite)",
            |args| Ok(EarlyStopping::new(settings("EarlyStopping", args)?)?),
        )?
        .register_callback(
            "BackboneFinetuning",
            "freeze the model's backbone, then train it at a rising share of the rate (backbone, unfreeze_backbone_at_epoch, multiplier, backbone_initial_ratio_lr, should_align, train_bn)",
            |args| Ok(BackboneFinetuning::new(settings("BackboneFinetuning", args)?)?),
        )?
        .register_callback(
            "EMAWeightAveraging",
            "validate, save and end fit with an exponential moving average of the weights (decay, update_every_n_steps, update_starting_at_step, update_starting_at_epoch)",
            |args| Ok(EMAWeightAveraging::new(settings("EMAWeightAveraging", args)?)?),
        )?
        .register_callback(
            "StochasticWeightAveraging",
            "average the weights of the last epochs at a constant or annealed rate (swa_lrs, swa_epoch_start, annealing_epochs, annealing_strategy)",
            |args| {
                let config = settings("StochasticWeightAveraging", args)?;
                Ok(StochasticWeightAveraging::new(config)?)
            },
        )?
        .register_callback(
            "LearningRateMonitor",
            "log the learning rate (logging_interval: step or epoch)",
            |args| Ok(LearningRateMonitor::new(settings("LearningRateMonitor", args)?)),
        )?
        .register_callback(
            "DeviceStatsMonitor",
            "log the accelerator's device stats every log_every_n_steps",
            |args| Ok(DeviceStatsMonitor::new(settings("DeviceStatsMonitor", args)?)),
        )?
        .register_callback(
            "OnExceptionCheckpoint",
            "save a checkpoint when fit fails (dirpath, filename)",
            |args| Ok(OnExceptionCheckpoint::new(settings("OnExceptionCheckpoint", args)?)),
        )?
        .register_callback(
            "ThroughputMonitor",
            "log batches, samples, items and FLOPs per second and MFU (window_size, items_per_sample, flops_per_sample, available_flops)",
            |args| Ok(ThroughputMonitor::new(settings("ThroughputMonitor", args)?)?),
        )?
        .register_callback(
            "PredictionWriter",
            "write predict's results as JSON lines, a file per rank (output_dir, write_interval: batch or epoch)",
            |args| Ok(JsonLinesWriter::callback(settings("PredictionWriter", args)?)?),
        )?
        .register_callback(
            "Timer",
            "time each stage and stop fit when the training time reaches duration (duration, interval: step or epoch, verbose)",
            |args| Ok(Timer::new(settings("Timer", args)?)),
        )?
        .register_callback(
            "ProgressBar",
            "the progress bar (added by default; refresh_rate)",
            |args| Ok(ProgressBar::new(settings("ProgressBar", args)?)),
        )
}

fn loggers(plugins: Plugins) -> Result<Plugins, RegistryError> {
    plugins
        .register_logger("csv", "metrics.csv and hparams.yaml", |dir| {
            Ok(CsvLogger::new(dir))
        })?
        .register_logger(
            "tensorboard",
            "TensorBoard event files",
            TensorBoardLogger::new,
        )?
        .add_logger(
            "mlflow",
            "an MLflow tracking server (MLFLOW_TRACKING_URI), with the csv logger's local copy",
            MlflowLogger::new,
            Some("csv"),
        )
}
