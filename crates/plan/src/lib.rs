//! ember-plan: everything ember decides before a tensor exists, without burn.
//!
//! It turns flags, config files, the process environment and the device inventory into a
//! [`Plan`] (the pure [`connect`] function), knows the registered names (the [`Catalog`] of
//! accelerators, strategies, plugins and [`ClusterEnvironment`]s), parses the Trainer's loop
//! options ([`TrainerOptions`]), and defines what crosses between processes ([`Collective`],
//! [`Engine`]). ember-core builds the Trainer on it; ember-mpi implements its collective traits.
//! Nothing here depends on burn (see `docs/architecture.md`).

pub mod accelerator;
pub mod catalog;
pub mod check;
pub mod cluster;
pub mod collective;
pub mod config;
pub mod connector;
pub mod devices;
pub mod error;
pub mod flags;
pub mod init_args;
pub mod inventory;
pub mod names;
pub mod options;
pub mod plan;
pub mod precision;
pub mod process_group;
pub mod stage;
pub mod strategy;
mod world;

pub use accelerator::AcceleratorKind;
pub use catalog::{AcceleratorSpec, Catalog, PrecisionInfo};
pub use check::PlanCheck;
pub use cluster::{ClusterEnvironment, Env, Ranks};
pub use collective::{Collective, Engine, KeyValueStore, LocalKeyValueStore, ReduceOp};
pub use connector::connect;
pub use devices::DevicesFlag;
pub use error::{FlagError, PlanResult};
pub use flags::TrainerFlags;
pub use inventory::Inventory;
pub use options::TrainerOptions;
pub use plan::{Launcher, Plan};
pub use precision::Precision;
pub use stage::Stage;
pub use strategy::StrategyInfo;
