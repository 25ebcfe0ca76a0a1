//! The registry: run-time names bound to compile-time accelerator types.

use std::fmt;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;

use crate::accelerator::{self, Accelerator, AcceleratorKind};
use crate::callbacks::{Callback, CallbackFactory};
use crate::catalog::{Catalog, PluginInfo, PluginKind, RESERVED_ACCELERATOR_NAMES};
use crate::check::PlanCheck;
use crate::checkpoint_io::CheckpointIO;
use crate::cluster::ClusterEnvironment;
use crate::collective::{Collective, Engine};
use crate::context::RunContext;
use crate::error::{FlagError, PlanResult};
use crate::factories::PluginFactories;
use crate::inventory::{INVENTORY_VAR, Inventory};
use crate::job::Job;
use crate::loggers::{Logger, LoggerFactory};
use crate::options::{CALLBACK_NAMES, LoggerKind, callback_key};
use crate::plan::Plan;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::strategy::{Strategy, StrategyParts};
use crate::precision::Precision;
use crate::strategy::StrategyInfo;

type Runner<J> = fn(J, &RunContext) -> anyhow::Result<<J as Job>::Output>;

fn run_on<J: Job, A: Accelerator>(job: J, context: &RunContext) -> anyhow::Result<J::Output> {
    job.run::<A>(context)
}

/// A registration that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is taken; `register_override` replaces an entry on purpose.
    Duplicate {
        /// `accelerator`, `strategy`, `plugin` or `cluster environment`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The name is empty, reserved, or has characters other than `a-z 0-9 _ -`.
    BadName {
        /// `accelerator`, `strategy`, `plugin` or `cluster environment`.
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
                    "{what} `{name}`: the name is already taken by a built-in precision, a plugin, a cluster environment or a process group backend"
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

fn check_name(what: &'static str, name: &str) -> Result<(), RegistryError> {
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

/// Adds `(name, description)` to `listed` (what `--help` shows of the registered callbacks or
/// loggers), refusing a malformed name or one that, compared as `key` makes names, is a
/// built-in or already listed.
fn list_free(
    what: &'static str,
    listed: &mut Vec<(String, String)>,
    (name, description): (&str, &str),
    builtins: &[&str],
    key: fn(&str) -> String,
) -> Result<(), RegistryError> {
    check_name(what, name)?;
    let taken = builtins
        .iter()
        .copied()
        .chain(listed.iter().map(|(n, _)| n.as_str()));
    if taken.map(key).any(|k| k == key(name)) {
        return Err(RegistryError::Duplicate {
            what,
            name: name.to_owned(),
        });
    }
    listed.push((name.to_owned(), description.to_owned()));
    Ok(())
}

/// Accelerators, strategies, plugins and cluster environments by name, with a runner for job
/// `J` per accelerator, and the distributed engine that starts and joins the processes of a
/// multi-process run.
pub struct Registry<J: Job> {
    catalog: Catalog,
    runners: Vec<Runner<J>>,
    factories: PluginFactories,
    engine: Option<Box<dyn Engine>>,
}

impl<J: Job> Default for Registry<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J: Job> Registry<J> {
    /// A registry with the built-in strategies and no accelerators.
    pub fn new() -> Self {
        Self {
            catalog: Catalog::default(),
            runners: Vec::new(),
            factories: PluginFactories::default(),
            engine: None,
        }
    }

    /// Sets the distributed engine (e.g. `ember_mpi::MpiEngine`) that runs with more than one
    /// process use; without one they are refused.
    pub fn with_engine(mut self, engine: impl Engine + 'static) -> Self {
        self.engine = Some(Box::new(engine));
        self
    }

    /// The distributed engine, if one is set.
    pub fn engine(&self) -> Option<&dyn Engine> {
        self.engine.as_deref()
    }

    /// Registers accelerator `A` under `A::name()`; a taken name is an error.
    pub fn register<A: Accelerator>(mut self) -> Result<Self, RegistryError> {
        check_name("accelerator", A::name())?;
        if self.catalog.accelerator(A::name()).is_some() {
            return Err(RegistryError::Duplicate {
                what: "accelerator",
                name: A::name().to_owned(),
            });
        }
        self.catalog.accelerators.push(accelerator::spec::<A>());
        self.runners.push(run_on::<J, A>);
        Ok(self)
    }

    /// Registers accelerator `A`, replacing any accelerator of the same name.
    pub fn register_override<A: Accelerator>(mut self) -> Result<Self, RegistryError> {
        check_name("accelerator", A::name())?;
        match self
            .catalog
            .accelerators
            .iter()
            .position(|a| a.name == A::name())
        {
            Some(i) => {
                self.catalog.accelerators[i] = accelerator::spec::<A>();
                self.runners[i] = run_on::<J, A>;
                Ok(self)
            }
            None => self.register::<A>(),
        }
    }

    /// Registers a strategy built by `factory` over the parts the Trainer connects; a taken
    /// name is an error. It becomes selectable as `--trainer.strategy=NAME`.
    pub fn register_strategy(
        mut self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        check_name("strategy", &info.name)?;
        if self.catalog.strategy(&info.name).is_some() {
            return Err(RegistryError::Duplicate {
                what: "strategy",
                name: info.name,
            });
        }
        PluginFactories::set(
            &mut self.factories.strategies,
            &info.name,
            Arc::new(factory),
        );
        self.catalog.strategies.push(info);
        Ok(self)
    }

    /// Registers a strategy, replacing any strategy of the same name (a built-in one too).
    pub fn register_override_strategy(
        mut self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        check_name("strategy", &info.name)?;
        PluginFactories::set(
            &mut self.factories.strategies,
            &info.name,
            Arc::new(factory),
        );
        self.catalog.strategies.retain(|s| s.name != info.name);
        self.catalog.strategies.push(info);
        Ok(self)
    }

    /// Registers a precision plugin built by `factory`; it becomes selectable as
    /// `--trainer.precision=NAME` or `--trainer.plugins=[NAME]`, and is planned as the named
    /// precision it builds on ([`PrecisionPlugin::precision`]).
    pub fn register_precision<P: PrecisionPlugin + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn() -> P + 'static,
    ) -> Result<Self, RegistryError> {
        let base = factory().precision();
        let factory = Arc::new(move || Box::new(factory()) as Box<dyn PrecisionPlugin>);
        let build = Arc::clone(&factory);
        let check = PlanCheck::new(move |plan| build().check_plan(plan));
        self.add_plugin(name, description, PluginKind::Precision(base), Some(check))?;
        PluginFactories::set(&mut self.factories.precisions, name, factory);
        Ok(self)
    }

    /// Registers a checkpoint IO built by `factory`; it becomes selectable as
    /// `--trainer.plugins=[NAME]`.
    pub fn register_checkpoint_io<C: CheckpointIO + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn() -> C + 'static,
    ) -> Result<Self, RegistryError> {
        self.add_plugin(name, description, PluginKind::CheckpointIo, None)?;
        let factory = Arc::new(move || Arc::new(factory()) as Arc<dyn CheckpointIO>);
        PluginFactories::set(&mut self.factories.checkpoint_ios, name, factory);
        Ok(self)
    }

    /// Registers a cluster environment; it is detected before the built-ins (in registration
    /// order) and selectable as `--trainer.cluster_environment=NAME` or `--trainer.plugins=[NAME]`.
    pub fn register_cluster_environment(
        mut self,
        environment: impl ClusterEnvironment + 'static,
    ) -> Result<Self, RegistryError> {
        let name = environment.name().to_owned();
        self.check_free("cluster environment", &name)?;
        // After those registered before, ahead of the built-ins.
        let environments = &mut self.catalog.cluster_environments;
        let builtins = crate::cluster::builtin_environments().len();
        environments.insert(environments.len() - builtins, Arc::new(environment));
        Ok(self)
    }

    /// Registers a callback built by `factory` from its `init_args` (a JSON table, `{}` when
    /// none are given); it becomes selectable as `--trainer.callbacks=[NAME]` or as
    /// `{class_path: NAME, init_args: {...}}` in a config file, and is listed in `--help`. Names
    /// match as the built-ins' do (case, `_` and `-` aside), so `MyCallback` selects `my_callback`.
    pub fn register_callback<C: Callback + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn(&Value) -> anyhow::Result<C> + 'static,
    ) -> Result<Self, RegistryError> {
        let builtins = CALLBACK_NAMES.map(|(n, _)| n);
        let listed = &mut self.catalog.callbacks;
        list_free(
            "callback",
            listed,
            (name, description),
            &builtins,
            callback_key,
        )?;
        let factory: CallbackFactory =
            Arc::new(move |args| Ok(Box::new(factory(args)?) as Box<dyn Callback>));
        PluginFactories::set(&mut self.factories.callbacks, name, factory);
        Ok(self)
    }

    /// Registers a logger built by `factory` in the run's version directory (rank 0 only); it
    /// becomes selectable as `--trainer.logger=[csv, NAME]` and is listed in `--help`. A name the
    /// `logger` option already reads as a built-in (`csv`, `tensorboard`, `mlflow`, their class
    /// names) or as `true`/`false` is taken.
    pub fn register_logger<L: Logger + 'static>(
        mut self,
        name: &str,
        description: &str,
        factory: impl Fn(&Path) -> anyhow::Result<L> + 'static,
    ) -> Result<Self, RegistryError> {
        if LoggerKind::is_reserved(name) {
            return Err(RegistryError::Duplicate {
                what: "logger",
                name: name.to_owned(),
            });
        }
        let listed = &mut self.catalog.loggers;
        list_free("logger", listed, (name, description), &[], str::to_owned)?;
        let factory: LoggerFactory =
            Arc::new(move |dir| Ok(Box::new(factory(dir)?) as Box<dyn Logger>));
        PluginFactories::set(&mut self.factories.loggers, name, factory);
        Ok(self)
    }

    /// Refuses a plugin or environment name that is malformed or already means something.
    fn check_free(&self, what: &'static str, name: &str) -> Result<(), RegistryError> {
        check_name(what, name)?;
        let taken = Precision::parse(name).is_ok()
            || self.catalog.plugin(name).is_some()
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

    fn add_plugin(
        &mut self,
        name: &str,
        description: &str,
        kind: PluginKind,
        check: Option<PlanCheck>,
    ) -> Result<(), RegistryError> {
        self.check_free("plugin", name)?;
        self.catalog.plugins.push(PluginInfo {
            name: name.to_owned(),
            description: description.to_owned(),
            kind,
            check,
        });
        Ok(())
    }

    /// The strategies, plugins, callbacks and loggers registered by name, with their factories.
    pub fn factories(&self) -> &PluginFactories {
        &self.factories
    }

    /// What the connector needs to know about the registered names.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Refuses a plan that this machine cannot carry out: one made from an injected inventory
    /// (`EMBER_INVENTORY`) that names devices the real hardware lacks.
    pub fn check_hardware(&self, plan: &Plan, inventory: &Inventory) -> PlanResult<()> {
        let (Some(spec), Some(accelerator)) = (
            inventory.injected_spec(),
            self.catalog.accelerator(&plan.accelerator),
        ) else {
            return Ok(());
        };
        let present = (accelerator.probe)();
        // On a CPU, device ids are process slots: one host device serves them all.
        let needed = match accelerator.kind {
            AcceleratorKind::Cpu => 1,
            _ => plan.devices.iter().max().map_or(0, |d| d + 1),
        };
        if present < needed {
            return Err(FlagError::new(
                INVENTORY_VAR,
                spec,
                format!(
                    "the plan uses {} devices {:?}, but this machine has {present} {} device(s); \
                     an injected inventory is for planning (--print-plan): unset EMBER_INVENTORY to train",
                    plan.accelerator, plan.devices, plan.accelerator
                ),
            ));
        }
        Ok(())
    }

    /// Runs `job` on the accelerator the plan names, after [`check_hardware`](Self::check_hardware),
    /// in a [`RunContext`] of the plan, `collective` (the joined ranks; `None` for one
    /// process) and the strategies and plugins registered here.
    pub fn run(
        &self,
        job: J,
        plan: &Plan,
        collective: Option<Rc<dyn Collective>>,
        inventory: &Inventory,
    ) -> anyhow::Result<J::Output> {
        self.check_hardware(plan, inventory)?;
        let index = self
            .catalog
            .accelerators
            .iter()
            .position(|a| a.name == plan.accelerator)
            .ok_or_else(|| {
                anyhow::anyhow!("accelerator `{}` is not registered", plan.accelerator)
            })?;
        let context = RunContext {
            plan: plan.clone(),
            collective,
            factories: Rc::new(self.factories.clone()),
            cluster: (self.catalog)
                .cluster_environment(&plan.cluster_environment)
                .cloned(),
        };
        (self.runners[index])(job, &context)
    }
}
