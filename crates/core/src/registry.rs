//! The registry: run-time names bound to compile-time accelerator types.

pub use crate::registered::{Plugins, RegistryError};

use std::path::Path;
use std::rc::Rc;

use serde_json::Value;

use crate::accelerator::{self, Accelerator, AcceleratorKind};
use crate::callbacks::Callback;
use crate::catalog::{Catalog, CheckpointIoInfo, PrecisionInfo};
use crate::checkpoint_io::CheckpointIO;
use crate::cluster::ClusterEnvironment;
use crate::cluster::Env;
use crate::collective::{Collective, Engine};
use crate::connector::connect;
use crate::context::RunContext;
use crate::error::{FlagError, PlanResult};
use crate::flags::TrainerFlags;
use crate::inventory::{INVENTORY_VAR, Inventory};
use crate::job::Job;
use crate::loggers::Logger;
use crate::plan::Plan;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::strategy::{Strategy, StrategyParts};
use crate::registered::check_name;
use ember_plan::strategy::StrategyInfo;

type Runner<J> = fn(J, &RunContext) -> anyhow::Result<<J as Job>::Output>;

fn run_on<J: Job, A: Accelerator>(job: J, context: &RunContext) -> anyhow::Result<J::Output> {
    job.run::<A>(context)
}

/// Accelerators by name, each with a runner for job `J`; the plugins registered by name
/// (ember's own first); and the distributed engine that starts and joins the processes of a
/// multi-process run.
pub struct Registry<J: Job> {
    plugins: Plugins,
    runners: Vec<Runner<J>>,
    engine: Option<Box<dyn Engine>>,
}

impl<J: Job> Default for Registry<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J: Job> Registry<J> {
    /// A registry with ember's own plugins and no accelerators.
    pub fn new() -> Self {
        Self {
            plugins: Plugins::builtin(),
            runners: Vec::new(),
            engine: None,
        }
    }

    /// Registers through `register`, a [`Plugins`] call.
    fn with_plugins(
        mut self,
        register: impl FnOnce(Plugins) -> Result<Plugins, RegistryError>,
    ) -> Result<Self, RegistryError> {
        self.plugins = register(self.plugins)?;
        Ok(self)
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
        if self.plugins.catalog.accelerator(A::name()).is_some() {
            return Err(RegistryError::Duplicate {
                what: "accelerator",
                name: A::name().to_owned(),
            });
        }
        self.plugins
            .catalog
            .accelerators
            .push(accelerator::spec::<A>());
        self.runners.push(run_on::<J, A>);
        Ok(self)
    }

    /// Registers accelerator `A`, replacing any accelerator of the same name.
    pub fn register_override<A: Accelerator>(mut self) -> Result<Self, RegistryError> {
        check_name("accelerator", A::name())?;
        match self
            .plugins
            .catalog
            .accelerators
            .iter()
            .position(|a| a.name == A::name())
        {
            Some(i) => {
                self.plugins.catalog.accelerators[i] = accelerator::spec::<A>();
                self.runners[i] = run_on::<J, A>;
                Ok(self)
            }
            None => self.register::<A>(),
        }
    }

    /// Registers a strategy built by `factory` over the parts the Trainer connects; a taken
    /// name is an error. It becomes selectable as `--trainer.strategy=NAME`, or with arguments
    /// as `--trainer.strategy='{class_path: NAME, init_args: {...}}'` when `info` declares
    /// them ([`StrategyInfo::with_args`]); the factory reads them from the plan in its parts
    /// (`parts.plan.init_args::<T>(NAME)`).
    pub fn register_strategy(
        self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_strategy(info, factory))
    }

    /// Registers a strategy, replacing any strategy of the same name (a built-in one too).
    pub fn register_override_strategy(
        self,
        info: StrategyInfo,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_override_strategy(info, factory))
    }

    /// Registers a precision plugin built by `factory` from the plan (its `init_args` among
    /// it: `plan.init_args::<T>(NAME)`); it becomes selectable as `--trainer.precision=NAME` or
    /// `--trainer.plugins=[NAME]` (`info.name`), and is planned as the named precision it builds
    /// on (`info.base`), refusing what `info` refuses (arguments included:
    /// [`PrecisionInfo::with_args`]).
    pub fn register_precision<P: PrecisionPlugin + 'static>(
        self,
        info: PrecisionInfo,
        factory: impl Fn(&Plan) -> anyhow::Result<P> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_precision(info, factory))
    }

    /// Registers a checkpoint IO built by `factory` from the plan; it becomes selectable as
    /// `--trainer.plugins=[NAME]` (`info.name`), or with arguments as `--trainer.plugins=[{class_path:
    /// NAME, init_args: {...}}]` when `info` declares them ([`CheckpointIoInfo::with_args`]; the
    /// factory reads them with `plan.init_args::<T>(NAME)`).
    pub fn register_checkpoint_io<C: CheckpointIO + 'static>(
        self,
        info: CheckpointIoInfo,
        factory: impl Fn(&Plan) -> anyhow::Result<C> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_checkpoint_io(info, factory))
    }

    /// Registers a cluster environment; it is detected before the built-ins (in registration
    /// order) and selectable as `--trainer.cluster_environment=NAME` or `--trainer.plugins=[NAME]`.
    pub fn register_cluster_environment(
        self,
        environment: impl ClusterEnvironment + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_cluster_environment(environment))
    }

    /// Registers a callback built by `factory` from its `init_args` (a JSON table, `{}` when
    /// none are given); it becomes selectable as `--trainer.callbacks=[NAME]` or as
    /// `{class_path: NAME, init_args: {...}}` in a config file, and is listed in `--help`. Names
    /// match as the built-ins' do (case, `_` and `-` aside), so `MyCallback` selects `my_callback`.
    pub fn register_callback<C: Callback + 'static>(
        self,
        name: &str,
        description: &str,
        factory: impl Fn(&Value) -> anyhow::Result<C> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_callback(name, description, factory))
    }

    /// Registers a logger built by `factory` in the run's version directory (rank 0 only); it
    /// becomes selectable as `--trainer.logger=[csv, NAME]` and is listed in `--help`. A name
    /// the `logger` option already reads (`csv`, `tensorboard`, `mlflow`, the same with a
    /// `Logger` suffix, `true`, `false`) is taken.
    pub fn register_logger<L: Logger + 'static>(
        self,
        name: &str,
        description: &str,
        factory: impl Fn(&Path) -> anyhow::Result<L> + 'static,
    ) -> Result<Self, RegistryError> {
        self.with_plugins(|p| p.register_logger(name, description, factory))
    }

    /// The plugins registered by name, with their factories.
    pub(crate) fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    /// What the connector needs to know about the registered names.
    pub(crate) fn catalog(&self) -> &Catalog {
        &self.plugins.catalog
    }

    /// The plan for a run of `flags` in environment `env` (its cluster variables, and
    /// `EMBER_INVENTORY` for an injected device inventory such as `cuda=4,wgpu=1`; without it
    /// the registered accelerators are asked what they see): what `--print-plan` prints.
    /// A choice these accelerators, plugins or devices cannot carry out is a [`FlagError`]
    /// naming the flag.
    pub fn plan(&self, flags: &TrainerFlags, env: &Env) -> Result<Plan, FlagError> {
        let inventory = Inventory::from_env(env, self.catalog())?;
        connect(flags, env, &inventory, self.catalog())
    }

    /// Refuses a plan that this machine cannot carry out: one made from an injected inventory
    /// (`EMBER_INVENTORY`) that names devices the real hardware lacks.
    pub(crate) fn check_hardware(&self, plan: &Plan, env: &Env) -> PlanResult<()> {
        let (Some(spec), Some(accelerator)) = (
            env.get(INVENTORY_VAR),
            self.catalog().accelerator(&plan.accelerator),
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

    /// Runs `job` on the accelerator the plan names (one [`check_hardware`](Self::check_hardware)
    /// passed), in a [`RunContext`] of the plan, `collective` (the joined ranks; `None` for
    /// one process) and the strategies and plugins registered here.
    pub(crate) fn run(
        &self,
        job: J,
        plan: &Plan,
        collective: Option<Rc<dyn Collective>>,
    ) -> anyhow::Result<J::Output> {
        let index = self
            .catalog()
            .accelerators
            .iter()
            .position(|a| a.name == plan.accelerator)
            .ok_or_else(|| {
                anyhow::anyhow!("accelerator `{}` is not registered", plan.accelerator)
            })?;
        let context = RunContext {
            plan: plan.clone(),
            collective,
            plugins: Rc::new(self.plugins.clone()),
            cluster: (self.catalog())
                .cluster_environment(&plan.cluster_environment)
                .cloned(),
        };
        (self.runners[index])(job, &context)
    }
}
