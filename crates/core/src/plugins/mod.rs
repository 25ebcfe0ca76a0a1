//! The Trainer's extension points besides accelerators: strategies, precision plugins and
//! checkpoint IO (cluster environments live with the plan, in [`crate::cluster`]).
//!
//! Each is a trait a user can implement outside ember and either register by name (then it is
//! selectable from the command line) or hand to the Trainer's builder. The registry keeps the
//! factories of those registered by name ([`PluginFactories`]); the CLI installs them on the
//! thread that runs the job, so `Trainer::new` builds what the plan names. See `docs/plugins.md`.

pub mod access;
pub mod ddp;
pub mod device_reduce;
pub mod precision;
pub(crate) mod reduce;
pub mod sharded;
pub mod strategy;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::checkpoint_io::CheckpointIO;
use precision::PrecisionPlugin;
use strategy::StrategyFactory;

/// Builds a precision plugin registered by name.
pub type PrecisionFactory = Arc<dyn Fn() -> Box<dyn PrecisionPlugin>>;

/// Builds a checkpoint IO registered by name.
pub type CheckpointIoFactory = Arc<dyn Fn() -> Arc<dyn CheckpointIO>>;

/// The factories of strategies, precision plugins and checkpoint IOs registered by name.
#[derive(Clone, Default)]
pub struct PluginFactories {
    pub(crate) strategies: Vec<(String, StrategyFactory)>,
    pub(crate) precisions: Vec<(String, PrecisionFactory)>,
    pub(crate) checkpoint_ios: Vec<(String, CheckpointIoFactory)>,
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

    pub(crate) fn set<T>(entries: &mut Vec<(String, T)>, name: &str, factory: T) {
        entries.retain(|(n, _)| n != name);
        entries.push((name.to_owned(), factory));
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<PluginFactories>>> = const { RefCell::new(None) };
}

/// Makes `factories` this thread's registered plugins until the guard is dropped.
pub fn install(factories: PluginFactories) -> Installed {
    CURRENT.with(|c| *c.borrow_mut() = Some(Rc::new(factories)));
    Installed(())
}

/// The plugins installed on this thread (none outside the CLI).
pub fn current() -> Rc<PluginFactories> {
    CURRENT.with(|c| c.borrow().clone()).unwrap_or_default()
}

/// Keeps plugins installed; uninstalls them when dropped.
#[must_use = "the plugins are uninstalled when this guard is dropped"]
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}
