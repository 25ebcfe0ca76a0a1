//! ember-core: the Trainer and everything that touches burn.
//!
//! It defines the [`Accelerator`] seam between burn backend types and run-time names, the
//! [`Registry`] that binds them, the plugin traits ([`Strategy`], [`PrecisionPlugin`],
//! checkpoint IO), the [`Cli`], and the [`Trainer`] with its loops, callbacks and loggers.
//! The planning layer it builds on (flags, connector, plan, cluster environments, catalog,
//! collective traits) is ember-plan, re-exported here under the same module names.
//! It depends on no burn backend; accelerator crates bring those.
//! See `docs/architecture.md` for why it is shaped this way.

pub mod accelerator;
mod agreed;
pub mod app;
pub mod batch_size_find;
pub use ember_plan::{
    catalog, check, cluster, collective, config, connector, devices, error, flags, inventory,
    options, plan, stage,
};
pub mod callbacks;
pub mod checkpoint_io;
pub mod child;
pub mod cli;
pub mod context;
pub mod host_alloc;
pub mod host_float;
pub mod host_pool;
pub mod job;
pub mod loggers;
pub mod metrics;
pub mod nn;
pub mod optim;
pub mod plugins;
pub mod quiet;
pub mod registered;
mod registry;
pub mod trainer;
pub mod vision;

pub use accelerator::{Accelerator, AcceleratorKind, DeviceOf, DeviceStats};
pub use app::{App, AppJob, AppOutput, InitModel, RunsWith};
pub use catalog::{AcceleratorSpec, Catalog, CheckpointIoInfo, PrecisionInfo};
pub use check::PlanCheck;
pub use cli::{Cli, CliOutcome, Invocation};
pub use cluster::{ClusterEnvironment, Env, Ranks};
pub use connector::connect;
pub use context::RunContext;
pub use devices::DevicesFlag;
pub use ember_derive::ConfigDefault;
pub use ember_plan::precision::Precision;
pub use ember_plan::strategy::StrategyInfo;
pub use ember_plan::{Stage, TrainerOptions};
pub use error::FlagError;
pub use flags::TrainerFlags;
pub use inventory::Inventory;
pub use job::Job;
pub use plan::{Launcher, Plan};
pub use plugins::access::{Gradients, ParallelGradients};
pub use plugins::ddp::Ddp;
pub use plugins::ddp_sharded::DdpSharded;
pub use plugins::precision::{MixedPrecision, PrecisionPlugin, TruePrecision};
pub use plugins::scaler::GradScaler;
pub use plugins::shard::Shard;
pub use plugins::strategy::{OptimizerSharding, SingleDevice, Strategy, StrategyParts};
pub use plugins::weights::Weights;
pub use registry::{Plugins, Registry, RegistryError};
pub use trainer::data::{
    ArrayFile, Batches, DataLoaders, DataModule, DataSource, FromDataModule, ItemKey, Loader,
    ShardFormat, Shards, SharedBatcher, TokenWindows, epoch_permutation,
};
pub use trainer::freezing;
pub use trainer::hparams::Hparams;
pub use trainer::log::{LogOptions, LogValue, Reduce, StepLog};
pub use trainer::loops::step::ManualOptimization;
pub use trainer::lr_find::LrFinding;
pub use trainer::module::{
    BatcherFor, ConfiguredOptimizers, EpochEnd, EvalBatch, LightningModule, Manual, MissingStep,
    Optimizers, Prediction, SchedulerInterval, TrainingModule,
};
pub use trainer::stack::Stack;
pub use trainer::{FitOutcome, Plugin, Trainer, TrainerBuilder};
