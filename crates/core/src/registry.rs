//! The registry: run-time names bound to compile-time accelerator types.

use std::fmt;

use crate::accelerator::{Accelerator, AcceleratorKind};
use crate::catalog::{AcceleratorSpec, Catalog, RESERVED_ACCELERATOR_NAMES};
use crate::collective::Engine;
use crate::error::{FlagError, PlanResult};
use crate::inventory::{INVENTORY_VAR, Inventory};
use crate::job::Job;
use crate::plan::Plan;
use crate::strategy::StrategyInfo;

type Runner<J> = fn(J, &Plan) -> anyhow::Result<<J as Job>::Output>;

fn run_on<J: Job, A: Accelerator>(job: J, plan: &Plan) -> anyhow::Result<J::Output> {
    job.run::<A>(plan)
}

/// A registration that was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is taken; `register_override` replaces an entry on purpose.
    Duplicate {
        /// `accelerator` or `strategy`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// The name is empty, reserved, or has characters other than `a-z 0-9 _ -`.
    BadName {
        /// `accelerator` or `strategy`.
        what: &'static str,
        /// The name.
        name: String,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::Duplicate { what, name } => write!(
                f,
                "{what} `{name}` is already registered; to replace it on purpose use register_override{}",
                if *what == "strategy" { "_strategy" } else { "" }
            ),
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

/// Accelerators and strategies by name, with a runner for job `J` per accelerator, and the
/// distributed engine that starts and joins the processes of a multi-process run.
pub struct Registry<J: Job> {
    catalog: Catalog,
    runners: Vec<Runner<J>>,
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
        self.catalog.accelerators.push(AcceleratorSpec::of::<A>());
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
                self.catalog.accelerators[i] = AcceleratorSpec::of::<A>();
                self.runners[i] = run_on::<J, A>;
                Ok(self)
            }
            None => self.register::<A>(),
        }
    }

    /// Registers a strategy; a taken name is an error.
    pub fn register_strategy(mut self, info: StrategyInfo) -> Result<Self, RegistryError> {
        check_name("strategy", &info.name)?;
        if self.catalog.strategy(&info.name).is_some() {
            return Err(RegistryError::Duplicate {
                what: "strategy",
                name: info.name,
            });
        }
        self.catalog.strategies.push(info);
        Ok(self)
    }

    /// Registers a strategy, replacing any strategy of the same name.
    pub fn register_override_strategy(mut self, info: StrategyInfo) -> Result<Self, RegistryError> {
        check_name("strategy", &info.name)?;
        self.catalog.strategies.retain(|s| s.name != info.name);
        self.catalog.strategies.push(info);
        Ok(self)
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

    /// Runs `job` on the accelerator the plan names, after [`check_hardware`](Self::check_hardware).
    pub fn run(&self, job: J, plan: &Plan, inventory: &Inventory) -> anyhow::Result<J::Output> {
        self.check_hardware(plan, inventory)?;
        let index = self
            .catalog
            .accelerators
            .iter()
            .position(|a| a.name == plan.accelerator)
            .ok_or_else(|| {
                anyhow::anyhow!("accelerator `{}` is not registered", plan.accelerator)
            })?;
        (self.runners[index])(job, plan)
    }
}
