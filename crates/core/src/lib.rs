//! ember-core: the backend-free heart of ember.
//!
//! It defines the [`Accelerator`] seam between burn backend types and run-time names, the
//! [`Registry`] that binds them, the pure [`connect`] function that turns flags, environment
//! and device inventory into a [`Plan`], the cluster environments, the [`Cli`], and the
//! [`Trainer`] with its loops, callbacks, loggers and checkpoint IO.
//! It depends on no burn backend; accelerator crates bring those.
//! See `docs/architecture.md` for why it is shaped this way.

pub mod accelerator;
pub mod callbacks;
pub mod catalog;
pub mod checkpoint_io;
pub mod cli;
pub mod cluster;
pub mod collective;
pub mod config;
pub mod connector;
pub mod devices;
pub mod error;
pub mod flags;
pub mod inventory;
pub mod job;
pub mod loggers;
pub mod plan;
pub mod plugins;
pub mod precision;
pub mod registry;
pub mod strategy;
pub mod trainer;

pub use accelerator::{Accelerator, AcceleratorKind, DeviceOf, DeviceStats};
pub use catalog::{AcceleratorSpec, Catalog};
pub use cli::{Cli, CliOutcome, Invocation, Stage};
pub use cluster::{ClusterEnvironment, Env, Ranks};
pub use connector::connect;
pub use devices::DevicesFlag;
pub use error::FlagError;
pub use flags::TrainerFlags;
pub use inventory::Inventory;
pub use job::Job;
pub use plan::{Launcher, Plan};
pub use plugins::access::{Gradients, Weights};
pub use plugins::ddp::Ddp;
pub use plugins::precision::{MixedPrecision, PrecisionPlugin, TruePrecision};
pub use plugins::strategy::{SingleDevice, Strategy, StrategyParts};
pub use precision::Precision;
pub use registry::{Registry, RegistryError};
pub use strategy::StrategyInfo;
pub use trainer::data::{DataModule, Loader, epoch_permutation};
pub use trainer::log::{LogOptions, Reduce, StepLog};
pub use trainer::module::{
    EvalModule, Optimizers, PredictModule, SchedulerInterval, TrainingModule,
};
pub use trainer::options::TrainerOptions;
pub use trainer::{FitOutcome, Trainer, TrainerBuilder};
