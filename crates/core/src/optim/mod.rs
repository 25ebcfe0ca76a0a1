//! Names for burn's optimizers as a [`TrainingModule`](crate::TrainingModule) spells its
//! `Optimizer` type: `type Optimizer = ember::optim::Adam<Self, B>;`.
//!
//! Rust cannot infer an associated type from `configure_optimizers`' body (that needs
//! `impl Trait` in associated types, unstable), so the type is written once, in these words.
//! Their configs are here too, so `configure_optimizers` needs no import of its own
//! (`optim::AdamConfig::new().init()`), and `Optimizers::adam(lr)`, `adamw(lr)` and `sgd(lr)`
//! make one with burn's default config at a constant learning rate. Adam is burn's, run by
//! [`adam::AdamRule`]: one fused kernel per parameter where the accelerator installed one.
//!
//! A model that declares [`AnyOptimizer`] and [`AnyScheduler`] takes the optimizer and
//! scheduler the run's config names (`--optimizer`, `--lr_scheduler`, as [`OptimizerSpec`] and
//! [`SchedulerSpec`] read them) through `Optimizers::from_hparams`.

use burn::optim::adaptor::OptimizerAdaptor;
use burn::tensor::backend::AutodiffBackend;

/// Adam (`AdamConfig::new().init()`) for module `M` on backend `B`: burn's Adam, each
/// parameter's update fused into one kernel where the accelerator has one ([`adam`]).
pub type Adam<M, B> = OptimizerAdaptor<AdamRule, M, B>;

/// AdamW (`AdamWConfig::new().init()`) for module `M` on backend `B`.
pub type AdamW<M, B> = OptimizerAdaptor<burn::optim::AdamW, M, B>;

/// SGD, with or without momentum (`SgdConfig::new().init()`), for module `M` on backend `B`.
pub type Sgd<M, B> = OptimizerAdaptor<burn::optim::Sgd<<B as AutodiffBackend>::InnerBackend>, M, B>;

pub mod adam;
mod any;
mod schedulers;
mod spec;
mod state;

pub use adam::{AdamConfig, AdamRule};
pub use any::{
    AnyOptimizer, AnyOptimizerItem, AnyOptimizerRecord, AnyScheduler, AnySchedulerRecord,
};
pub use burn::optim::{AdamWConfig, SgdConfig};
pub use schedulers::{SchedulerInterval, SchedulerKind, SchedulerSpec};
pub use spec::{AdamArgs, OptimizerSections, OptimizerSpec, SgdArgs};
pub use state::{ExactState, NamedTensors, OptimizerState, ParamState, join, split};
