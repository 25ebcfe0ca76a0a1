//! ember: the PyTorch Lightning architecture for models written with burn.
//!
//! Depend on this crate with the features for the hardware you want (`cpu` is the default;
//! `cuda` and `wgpu` add those accelerators; `tch` adds LibTorch's `tch-cpu` and `tch-cuda`;
//! `tpu-xla` adds `xla`, XLA through a PJRT plugin; `mpi` adds multi-process runs on OpenMPI).
//! [`registry`] returns a registry with every enabled
//! accelerator; add your own with [`Registry::register`] and run jobs through [`Cli`].

pub use burn;

/// What a model author needs, in one import: `use ember::prelude::*;` (beside
/// `use burn::prelude::*;` for burn's tensors and modules). Each item is documented where it
/// lives; the prelude only gathers them.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::{
        App, ConfigDefault, ConfiguredOptimizers, DataLoaders, DataModule, DataSource, EpochEnd,
        FromDataModule, Hparams, InitModel, ItemKey, LightningModule, Loader, LogOptions, Manual,
        ManualOptimization, Optimizers, Prediction, SchedulerInterval, Stack, Stage, StepLog,
        Trainer, TrainerFlags, TrainingModule,
    };
    #[doc(no_inline)]
    pub use burn::tensor::backend::AutodiffBackend;
}

#[doc(inline)]
pub use ember_core::{
    // Applications, jobs and the command line.
    App,
    AppJob,
    AppOutput,
    // Data.
    ArrayFile,
    BatcherFor,
    Batches,
    Cli,
    CliOutcome,
    ConfigDefault,
    // Models.
    ConfiguredOptimizers,
    DataLoaders,
    DataModule,
    DataSource,
    // What a run is, and what it refuses.
    DevicesFlag,
    EpochEnd,
    // The Trainer.
    FitOutcome,
    FlagError,
    FromDataModule,
    Hparams,
    InitModel,
    Invocation,
    ItemKey,
    Job,
    Launcher,
    LightningModule,
    Loader,
    LogOptions,
    LogValue,
    LrFinding,
    Manual,
    ManualOptimization,
    MissingStep,
    Optimizers,
    Plan,
    Plugin,
    Precision,
    Prediction,
    Reduce,
    // Names bound to types.
    Registry,
    RegistryError,
    RunContext,
    RunsWith,
    SchedulerInterval,
    ShardFormat,
    Shards,
    SharedBatcher,
    Stack,
    Stage,
    StepLog,
    TokenWindows,
    Trainer,
    TrainerBuilder,
    TrainerFlags,
    TrainerOptions,
    TrainingModule,
    epoch_permutation,
};

/// Accelerators: a burn backend under a run-time name (see `docs/custom-accelerator.md`).
pub mod accelerator {
    #[doc(inline)]
    pub use ember_core::accelerator::{Accelerator, AcceleratorKind, DeviceStats};
    #[doc(inline)]
    pub use ember_core::devices::gpu_devices;
}
#[doc(inline)]
pub use accelerator::Accelerator;

/// The plugins a run is made of besides its accelerator: strategies, precision plugins,
/// checkpoint IO, cluster environments and collectives (see `docs/plugins.md`).
pub mod plugins {
    #[doc(inline)]
    pub use ember_core::checkpoint_io::{CheckpointIO, LocalCheckpointIO};
    #[doc(inline)]
    pub use ember_core::cluster::{ClusterEnvironment, Env, Ranks};
    #[doc(inline)]
    pub use ember_core::collective::{Collective, Engine, KeyValueStore, ReduceOp, SingleProcess};
    #[doc(inline)]
    pub use ember_core::plugins::device_reduce::DeviceCollective;
    #[doc(inline)]
    pub use ember_core::plugins::weights::ParamInfo;
    #[doc(inline)]
    pub use ember_core::{
        CheckpointIoInfo, Ddp, DdpSharded, GradScaler, Gradients, MixedPrecision,
        OptimizerSharding, ParallelGradients, PlanCheck, PrecisionInfo, PrecisionPlugin, Shard,
        SingleDevice, Strategy, StrategyInfo, StrategyParts, TruePrecision, Weights,
    };
}

/// Reading a checkpoint file ember wrote (its weights, optimizer state and progress).
pub mod checkpoint {
    #[doc(inline)]
    pub use ember_core::trainer::checkpoint::{
        CallbackTensors, Checkpoint, CheckpointHeader, Progress,
    };
}

/// The Trainer's loop options that take more than a number (see `docs/trainer.md`).
pub mod options {
    #[doc(inline)]
    pub use ember_core::options::{
        BatchSizeFind, CallbackSpec, CheckpointWrites, ClipAlgorithm, Limit, LrFind, ProfilerKind,
        ScaleMode, SweepMode,
    };
}

/// Where metrics and hyperparameters go (see `docs/trainer.md`, Loggers).
pub mod loggers {
    #[doc(inline)]
    pub use ember_core::loggers::{CsvLogger, Logger, Loggers, MlflowLogger, TensorBoardLogger};
}

/// Optimizers by name, as `configure_optimizers` returns them, and those a run's config
/// chooses (`--optimizer`, `--lr_scheduler`).
pub mod optim {
    #[doc(inline)]
    pub use ember_core::optim::adam::{AdamKernel, AdamStep, install_adam};
    #[doc(inline)]
    pub use ember_core::optim::{
        Adam, AdamArgs, AdamConfig, AdamRule, AdamW, AdamWConfig, AnyOptimizer, AnyOptimizerItem,
        AnyOptimizerRecord, AnyScheduler, AnySchedulerRecord, ExactState, OptimizerSections,
        OptimizerSpec, OptimizerState, ParamState, SchedulerKind, SchedulerSpec, Sgd, SgdArgs,
        SgdConfig,
    };
}

/// Callbacks: code the Trainer calls at Lightning's hook points, ember's own and yours.
pub mod callbacks {
    #[doc(inline)]
    pub use ember_core::callbacks::{
        AnnealingStrategy, AveragedWeights, BackboneFinetuning, BackboneFinetuningConfig,
        BuiltCallbacks, Callback, CallbackContext, CheckpointTensors, DeviceStatsMonitor,
        EMAWeightAveraging, EarlyStopping, EarlyStoppingConfig, EmaConfig, Freeze, JsonLinesConfig,
        JsonLinesWriter, LearningRateMonitor, LrOverride, Mode, ModelCheckpoint,
        ModelCheckpointConfig, OnExceptionCheckpoint, OnExceptionCheckpointConfig, PredictedBatch,
        PredictionWriter, ProgressBar, ProgressBarMetrics, StochasticWeightAveraging, SwaConfig,
        SwaEpochStart, Throughput, ThroughputConfig, ThroughputMonitor, Timer, TimerClock,
        TimerConfig, TimerInterval, TrainerState, WriteInterval, WritePredictions,
    };
}

/// Layers of ember's own: burn's layers, fused where the accelerator has a kernel for them
/// (see `docs/trainer.md`, Layers), and activation checkpointing of chosen blocks.
pub mod nn {
    #[doc(inline)]
    pub use ember_core::nn::{
        BatchNorm, BatchNormConfig, BatchNormKernel, BatchNormStats, LayerNorm, LayerNormConfig,
        LayerNormKernel, Recomputing, install_batch_norm, install_layer_norm, recompute,
    };
}

pub use ember_core::{freezing, metrics, vision};

#[doc(inline)]
pub use ember_core::host_float::set_flush_denormal_everywhere;
#[doc(inline)]
pub use ember_core::host_pool::join_compute_pool;

#[cfg(feature = "cpu")]
pub use ember_accel_cpu as cpu;
#[cfg(feature = "cuda")]
pub use ember_accel_cuda as cuda;
#[cfg(feature = "tch")]
pub use ember_accel_tch as tch;
#[cfg(feature = "tpu-xla")]
pub use ember_accel_tpu_xla as xla;
#[cfg(feature = "wgpu")]
pub use ember_accel_wgpu as wgpu;
#[cfg(feature = "mpi")]
pub use ember_mpi as mpi;

/// A registry holding every accelerator this build enables (cpu, cuda, wgpu, tch-cpu,
/// tch-cuda and xla by feature), and
/// with the `mpi` feature the OpenMPI engine that multi-process (ddp) runs use.
pub fn registry<J: Job>() -> Registry<J> {
    let registry = Registry::new();
    #[cfg(feature = "mpi")]
    let registry = registry.with_engine(mpi::MpiEngine);
    #[cfg(feature = "cpu")]
    let registry = registry
        .register::<cpu::CpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "cuda")]
    let registry = registry
        .register::<cuda::CudaAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "wgpu")]
    let registry = registry
        .register::<wgpu::WgpuAccelerator>()
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "tch")]
    let registry = registry
        .register::<tch::TchCpuAccelerator>()
        .and_then(|r| r.register::<tch::TchCudaAccelerator>())
        .expect("the built-in accelerators have distinct names");
    #[cfg(feature = "tpu-xla")]
    let registry = registry
        .register::<xla::XlaAccelerator>()
        .expect("the built-in accelerators have distinct names");
    registry
}

/// Runs application `A` from the command line with every accelerator this build enables and
/// what [`App::register`] adds (Lightning's `LightningCLI(Model, DataModule)`):
/// `fn main() -> ExitCode { ember::run::<MyApp>() }`. A registration the registry refuses (a
/// name taken twice) is reported and exits 2.
pub fn run<A: App>() -> std::process::ExitCode {
    match A::register(registry::<AppJob<A>>()) {
        Ok(registry) => Cli::for_app::<A>().run(&registry, AppJob::from),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
