//! The factories of the plugins, callbacks and loggers registered by name, which the registry
//! fills and the Trainer builds from ([`PluginFactories`]).

use std::sync::Arc;

use crate::callbacks::CallbackFactory;
use crate::checkpoint_io::CheckpointIO;
use crate::loggers::LoggerFactory;
use crate::plugins::ddp::Ddp;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::sharded::DdpSharded;
use crate::plugins::strategy::{SingleDevice, StrategyFactory};
use crate::plugins::xla::XlaStrategy;
use crate::strategy::{DDP, DDP_SHARDED, SINGLE_DEVICE, XLA};

/// Builds a precision plugin registered by name.
pub type PrecisionFactory = Arc<dyn Fn() -> Box<dyn PrecisionPlugin>>;

/// Builds a checkpoint IO registered by name.
pub type CheckpointIoFactory = Arc<dyn Fn() -> Arc<dyn CheckpointIO>>;

/// The factories of strategies, precision plugins, checkpoint IOs, callbacks and loggers
/// registered by name; by
/// default the built-in strategies (`single_device`, `ddp`, `ddp_sharded`, `xla`), which a registry
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
                builtin(XLA, Arc::new(|p| Ok(Box::new(XlaStrategy::new(p))))),
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
