//! The Trainer's extension points besides accelerators: strategies, precision plugins and
//! checkpoint IO (cluster environments live with the plan, in [`crate::cluster`]).
//!
//! Each is a trait a user can implement outside ember and either register by name (then it is
//! selectable from the command line) or hand to the Trainer's builder. The registry keeps the
//! factories of those registered by name ([`PluginFactories`], the built-in strategies
//! included) and passes them to the job in its [`RunContext`](crate::context::RunContext), from
//! which the Trainer builds what the plan names. See `docs/plugins.md`.

pub mod access;
pub mod ddp;
pub mod device_reduce;
pub mod dtype;
pub mod grads;
pub mod precision;
pub(crate) mod reduce;
pub mod scaler;
pub mod shard;
pub mod sharded;
pub mod strategy;
pub mod weights;

use std::sync::Arc;

use crate::callbacks::CallbackFactory;
use crate::checkpoint_io::CheckpointIO;
use crate::loggers::LoggerFactory;
use crate::strategy::{DDP, DDP_SHARDED, SINGLE_DEVICE};
use ddp::Ddp;
use precision::PrecisionPlugin;
use sharded::DdpSharded;
use strategy::{SingleDevice, StrategyFactory};

/// Builds a precision plugin registered by name.
pub type PrecisionFactory = Arc<dyn Fn() -> Box<dyn PrecisionPlugin>>;

/// Builds a checkpoint IO registered by name.
pub type CheckpointIoFactory = Arc<dyn Fn() -> Arc<dyn CheckpointIO>>;

/// The factories of strategies, precision plugins, checkpoint IOs, callbacks and loggers
/// registered by name; by
/// default the built-in strategies (`single_device`, `ddp`, `ddp_sharded`), which a registry
/// may override as it may any other.
#[derive(Clone)]
pub struct PluginFactories {
    pub(crate) strategies: Vec<(String, StrategyFactory)>,
    pub(crate) precisions: Vec<(String, PrecisionFactory)>,
    pub(crate) checkpoint_ios: Vec<(String, CheckpointIoFactory)>,
    pub(crate) callbacks: Vec<(String, CallbackFactory)>,
    pub(crate) loggers: Vec<(String, LoggerFactory)>,
}

impl Default for PluginFactories {
    fn default() -> Self {
        let builtin = |name: &str, factory: StrategyFactory| (name.to_owned(), factory);
        Self {
            strategies: vec![
                builtin(
                    SINGLE_DEVICE,
                    Arc::new(|p| Ok(Box::new(SingleDevice::new(p)))),
                ),
                builtin(DDP, Arc::new(|p| Ok(Box::new(Ddp::new(p))))),
                builtin(DDP_SHARDED, Arc::new(|p| Ok(Box::new(DdpSharded::new(p))))),
            ],
            precisions: Vec::new(),
            checkpoint_ios: Vec::new(),
            callbacks: Vec::new(),
            loggers: Vec::new(),
        }
    }
}

fn find<'a, T>(entries: &'a [(String, T)], name: &str) -> Option<&'a T> {
    entries.iter().find(|(n, _)| n == name).map(|(_, f)| f)
}

impl PluginFactories {
    /// The factory of the strategy registered under `name`.
    pub fn strategy(&self, name: &str) -> Option<&StrategyFactory> {
        find(&self.strategies, name)
    }

    /// The factory of the precision plugin registered under `name`.
    pub fn precision(&self, name: &str) -> Option<&PrecisionFactory> {
        find(&self.precisions, name)
    }

    /// The factory of the checkpoint IO registered under `name`.
    pub fn checkpoint_io(&self, name: &str) -> Option<&CheckpointIoFactory> {
        find(&self.checkpoint_ios, name)
    }

    /// The callbacks registered by name, with their factories.
    pub fn callbacks(&self) -> &[(String, CallbackFactory)] {
        &self.callbacks
    }

    /// The loggers registered by name, with their factories.
    pub fn loggers(&self) -> &[(String, LoggerFactory)] {
        &self.loggers
    }

    pub(crate) fn set<T>(entries: &mut Vec<(String, T)>, name: &str, factory: T) {
        entries.retain(|(n, _)| n != name);
        entries.push((name.to_owned(), factory));
    }
}
