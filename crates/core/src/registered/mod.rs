//! The plugins registered by name — strategies, precision plugins, checkpoint IOs, cluster
//! environments, callbacks and loggers, ember's own and an application's alike — with what
//! the connector knows of each ([`Catalog`]) and the factory that builds it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;

use crate::callbacks::{Callback, CallbackFactory};
use crate::catalog::{
    Catalog, CheckpointIoInfo, PluginInfo, PrecisionInfo, RESERVED_ACCELERATOR_NAMES,
};
use crate::checkpoint_io::CheckpointIO;
use crate::cluster::ClusterEnvironment;
use crate::error::{FlagError, PlanResult};
use crate::loggers::{Logger, LoggerFactory};
use crate::options::{callback_key, is_logger_flag, logger_key, unknown_logger};
use crate::plan::Plan;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::strategy::{Strategy, StrategyFactory, StrategyParts};
use ember_plan::strategy::StrategyInfo;

pub mod build;
mod builtins;

/// Builds a precision plugin registered by name.
pub type PrecisionFactory = Arc<dyn Fn(&Plan) -> anyhow::Result<Box<dyn PrecisionPlugin>>>;

/// Builds a checkpoint IO registered by name.
pub type CheckpointIoFactory = Arc<dyn Fn(&Plan) -> anyhow::Result<Arc<dyn CheckpointIO>>>;

/// A registration that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is taken; `register_override` replaces an entry on purpose.
    Duplicate {
        /// `accelerator`, `strategy`, `plugin`, `cluster environment`, `callback` or `logger`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The name is empty, reserved, or has characters other than `a-z 0-9 _ -`.
    BadName {
        /// `accelerator`, `strategy`, `plugin`, `cluster environment`, `callback` or `logger`.
        what: &'static str,
        /// The name.
        name: String,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Duplicate { what, name } => match *what {
                "accelerator" | "strategy" => write!(
                    f,
                    "{what} `{name}` is already registered; to replace it on purpose use register_override{}",
                    if *what == "strategy" { "_strategy" } else { "" }
                ),
                "logger" | "callback" => write!(
                    f,
                    "{what} `{name}`: the name is already taken by a built-in {what} or one registered before"
                ),
                _ => write!(
                    f,
                    "{what} `{name}`: the name is already taken by a precision, a plugin, a cluster environment or a process group backend"
                ),
            },
            RegistryError::BadName { what, name } => write!(
                f,
                "cannot register {what} `{name}`: names are lowercase a-z, 0-9, `_` or `-`, and not {}",
                RESERVED_ACCELERATOR_NAMES.join(" or ")
            ),
        }
    }
}

impl std::error::Error for RegistryError {}

/// Refuses a name that is empty, reserved or has characters other than `a-z 0-9 _ -`.
pub(crate) fn check_name(what: &'static str, name: &str) -> Result<(), RegistryError> {
    let ok = !name.is_empty()
        && !RESERVED_ACCELERATOR_NAMES.contains(&name)
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(RegistryError::BadName {
            what,
            name: name.to_owned(),
        })
    }
}

/// Adds `(name, description)` to `listed` (what `--help` shows of the callbacks or loggers),
/// refusing a name whose `key` (how the option compares names) is already listed.
fn list_free(
    what: &'static str,
    listed: &mut Vec<(String, String)>,
    (name, description): (&str, &str),
    key: fn(&str) -> String,
) -> Result<(), RegistryError> {
    if listed.iter().any(|(n, _)| key(n) == key(name)) {
        return Err(RegistryError::Duplicate {
            what,
            name: name.to_owned(),
        });
    }
    listed.push((name.to_owned(), description.to_owned()));
    Ok(())
}

/// A logger registered by name: its factory, and the logger it brings along unless chosen
/// itself (an experiment tracker's local copy).
#[derive(Clone)]
struct LoggerEntry {
    name: String,
    factory: LoggerFactory,
    brings: Option<String>,
}

/// Every plugin registered by name, with its factory. [`Plugins::builtin`] holds ember's own,
/// registered with the same calls an application's go through; a [`Registry`](super::Registry)
/// starts from them.
#[derive(Clone)]
pub struct Plugins {
    pub(crate) catalog: Catalog,
    strategies: Vec<(String, StrategyFactory)>,
    precisions: Vec<(String, PrecisionFactory)>,
    checkpoint_ios: Vec<(String, CheckpointIoFactory)>,
    callbacks: Vec<(String, CallbackFactory)>,
    loggers: Vec<LoggerEntry>,
}

fn find<'a, T>(entries: &'a [(String, T)], name: &str) -> Option<&'a T> {
    entries.iter().find(|(n, _)| n == name).map(|(_, f)| f)
}

fn set<T>(entries: &mut Vec<(String, T)>, name: &str, factory: T) {
    entries.retain(|(n, _)| n != name);
    entries.push((name.to_owned(), factory));
}

impl Plugins {
    /// Nothing registered but the built-in cluster environments (which are detected, not
    /// built by name).
    fn empty() -> Self {
        Self {
            catalog: Catalog::default(),
            strategies: Vec::new(),
            precisions: Vec::new(),
            checkpoint_ios: Vec::new(),
            callbacks: Vec::new(),
            loggers: Vec::new(),
        }
    }

    /// Registers a strategy built by `factory`; a taken name is an error.
    pub fn register_strategy(
        self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        if self.catalog.strategy(&info.name).is_some() {
            return Err(RegistryError::Duplicate {
                what: "strategy",
                name: info.name,
            });
        }
        self.register_override_strategy(info, factory)
    }

    /// Registers a strategy, replacing any strategy of the same name.
    pub fn register_override_strategy(
        mut self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        check_name("strategy", &info.name)?;
        set(&mut self.strategies, &info.name, Arc::new(factory));
        self.catalog.strategies.retain(|s| s.name != info.name);
        self.catalog.strategies.push(info);
        Ok(self)
    }

    /// Registers a precision plugin built by `factory` from the plan (its `init_args` among
    /// it: [`Plan::init_args`]), planned as `info` says: the named precision it builds on, the
    /// plans it refuses and the arguments it takes. Nothing is built until a run uses it (then
    /// once, by the Trainer's builder, which checks it builds on `info.base`).
    pub fn register_precision<P: PrecisionPlugin + 'static>(
        mut self,
        info: PrecisionInfo,
        factory: impl Fn(&Plan) -> anyhow::Result<P> + 'static,
    ) -> Result<Self, RegistryError> {
        let name = info.name.clone();
        self.add_plugin(info.into())?;
        let factory: PrecisionFactory = Arc::new(move |plan| Ok(Box::new(factory(plan)?)));
        set(&mut self.precisions, &name, factory);
        Ok(self)
    }

    /// Registers a checkpoint IO built by `factory` from the plan (its `init_args` among it:
    /// [`Plan::init_args`]), taking the arguments `info` declares.
    pub fn register_checkpoint_io<C: CheckpointIO + 'static>(
        mut self,
        info: CheckpointIoInfo,
        factory: impl Fn(&Plan) -> anyhow::Result<C> + 'static,
    ) -> Result<Self, RegistryError> {
        let name = info.name.clone();
        self.add_plugin(info.into())?;
        let factory: CheckpointIoFactory = Arc::new(move |plan| Ok(Arc::new(factory(plan)?)));
        set(&mut self.checkpoint_ios, &name, factory);
        Ok(self)
    }

    /// Registers a cluster environment, detected after those registered before and ahead of
    /// the built-ins.
    pub fn register_cluster_environment(
        mut self,
        environment: impl ClusterEnvironment + 'static,
    ) -> Result<Self, RegistryError> {
        self.check_free("cluster environment", environment.name())?;
        let environments = &mut self.catalog.cluster_environments;
        let builtins = crate::cluster::builtin_environments().len();
        environments.insert(environments.len() - builtins, Arc::new(environment));
        Ok(self)
    }

    /// Registers a callback built by `factory` from its `init_args`. Names compare as the
    /// callbacks option compares them (case, `_` and `-` aside), so `MyCallback` selects
    /// `my_callback`.
    pub fn register_callback<C: Callback + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn(&Value) -> anyhow::Result<C> + 'static,
    ) -> Result<Self, RegistryError> {
        // Lightning's class names (`EarlyStopping`) are callback names too.
        check_name("callback", &name.to_ascii_lowercase()).map_err(|_| RegistryError::BadName {
            what: "callback",
            name: name.to_owned(),
        })?;
        list_free(
            "callback",
            &mut self.catalog.callbacks,
            (name, description),
            callback_key,
        )?;
        let factory: CallbackFactory =
            Arc::new(move |args| Ok(Box::new(factory(args)?) as Box<dyn Callback>));
        set(&mut self.callbacks, name, factory);
        Ok(self)
    }

    /// Registers a logger built by `factory` in the run's version directory. Names compare as
    /// the logger option compares them (case and a `Logger` suffix aside); `true` and `false`
    /// are taken.
    pub fn register_logger<L: Logger + 'static>(
        self,
        name: &str,
        description: &str,
        factory: impl Fn(&Path) -> anyhow::Result<L> + 'static,
    ) -> Result<Self, RegistryError> {
        self.add_logger(name, description, factory, None)
    }

    /// Registers a logger that brings logger `brings` along when that one is not chosen
    /// itself (mlflow keeps its local copy with the csv logger).
    fn add_logger<L: Logger + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn(&Path) -> anyhow::Result<L> + 'static,
        brings: Option<&str>,
    ) -> Result<Self, RegistryError> {
        check_name("logger", name)?;
        if is_logger_flag(name) {
            return Err(RegistryError::Duplicate {
                what: "logger",
                name: name.to_owned(),
            });
        }
        list_free(
            "logger",
            &mut self.catalog.loggers,
            (name, description),
            logger_key,
        )?;
        self.loggers.push(LoggerEntry {
            name: name.to_owned(),
            factory: Arc::new(move |dir| Ok(Box::new(factory(dir)?) as Box<dyn Logger>)),
            brings: brings.map(str::to_owned),
        });
        Ok(self)
    }

    /// Refuses a plugin or environment name that is malformed or already means something.
    fn check_free(&self, what: &'static str, name: &str) -> Result<(), RegistryError> {
        check_name(what, name)?;
        // The six named precisions are taken by their plugins, registered first.
        let taken = self.catalog.plugin(name).is_some()
            || self.catalog.cluster_environment(name).is_some()
            || self.catalog.process_group_backends().contains(&name);
        if taken {
            return Err(RegistryError::Duplicate {
                what,
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    fn add_plugin(&mut self, info: PluginInfo) -> Result<(), RegistryError> {
        self.check_free("plugin", &info.name)?;
        self.catalog.plugins.push(info);
        Ok(())
    }

    /// What the connector knows of the registered names.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Builds the strategy registered as `name` over `parts`.
    pub fn strategy(&self, name: &str, parts: StrategyParts) -> anyhow::Result<Box<dyn Strategy>> {
        let factory = find(&self.strategies, name).with_context(|| {
            format!(
                "the plan names strategy `{name}`, which is not registered in this job's context (register it on the Registry the CLI runs, or pass it to Trainer::builder(..).strategy(..))"
            )
        })?;
        factory(parts)
    }

    /// Builds the precision plugin the plan names: its precision plugin, else the one
    /// registered under its precision's name.
    pub fn precision(&self, plan: &Plan) -> anyhow::Result<Box<dyn PrecisionPlugin>> {
        let name = plan
            .precision_plugin
            .as_deref()
            .unwrap_or(plan.precision.name());
        let factory = find(&self.precisions, name).with_context(|| not_registered(name))?;
        let plugin = factory(plan)?;
        anyhow::ensure!(
            plugin.precision() == plan.precision,
            "precision plugin {name} runs {}, but the plan says {}",
            plugin.precision(),
            plan.precision
        );
        Ok(plugin)
    }

    /// Builds the checkpoint IO the plan names; `None` when it names none.
    pub fn checkpoint_io(&self, plan: &Plan) -> anyhow::Result<Option<Arc<dyn CheckpointIO>>> {
        let Some(name) = plan.checkpoint_io.as_deref() else {
            return Ok(None);
        };
        let factory = find(&self.checkpoint_ios, name).with_context(|| not_registered(name))?;
        Ok(Some(factory(plan)?))
    }

    /// Builds the callback `class_path` names (as the callbacks option compares names) from
    /// its `init_args`; `Ok(None)` when none is registered under that name.
    pub fn callback(
        &self,
        class_path: &str,
        init_args: &Value,
    ) -> Option<anyhow::Result<Box<dyn Callback>>> {
        let key = callback_key(class_path);
        let (_, factory) = self
            .callbacks
            .iter()
            .find(|(n, _)| callback_key(n) == key)?;
        Some(factory(init_args))
    }

    /// The registered names of the loggers `names` select (as the logger option compares
    /// names), after what they bring along unless chosen themselves; a name that selects none
    /// is a plan-time error of `--trainer.logger`.
    pub fn logger_names<'a>(&'a self, names: &'a [String]) -> PlanResult<Vec<&'a str>> {
        let mut chosen = Vec::new();
        for name in names {
            let entry = self.logger_entry(name).ok_or_else(|| {
                let registered = self.catalog.loggers.iter().map(|(n, _)| n.as_str());
                FlagError::new("--trainer.logger", name, unknown_logger(registered))
            })?;
            chosen.push(entry.name.as_str());
        }
        let mut brought: Vec<&str> = Vec::new();
        for entry in chosen.iter().filter_map(|n| self.logger_entry(n)) {
            if let Some(b) = entry.brings.as_deref()
                && !chosen.contains(&b)
                && !brought.contains(&b)
            {
                brought.push(b);
            }
        }
        brought.extend(chosen);
        Ok(brought)
    }

    /// Builds the logger registered as `name` in `dir`.
    pub fn logger(&self, name: &str, dir: &Path) -> anyhow::Result<Box<dyn Logger>> {
        let entry = self
            .logger_entry(name)
            .with_context(|| format!("logger `{name}` is not registered"))?;
        (entry.factory)(dir).with_context(|| format!("logger {name}"))
    }

    fn logger_entry(&self, name: &str) -> Option<&LoggerEntry> {
        let key = logger_key(name);
        self.loggers.iter().find(|e| logger_key(&e.name) == key)
    }
}

fn not_registered(name: &str) -> String {
    format!(
        "the plan names plugin `{name}`, which is not registered in this job's context: run through ember's Cli with the Registry that registers it, or pass it to Trainer::builder(..)"
    )
}
