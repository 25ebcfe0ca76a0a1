//! What the connector knows about registered accelerators and strategies, independent of any job.

use crate::accelerator::{Accelerator, AcceleratorKind};
use crate::devices::DevicesFlag;
use crate::error::list;
use crate::precision::Precision;
use crate::strategy::{StrategyInfo, builtin_strategies};

/// Names that select accelerators indirectly and so cannot be registered.
pub const RESERVED_ACCELERATOR_NAMES: [&str; 2] = ["auto", "gpu"];

/// An accelerator's metadata and its (type-erased) probing and device rules.
#[derive(Debug, Clone)]
pub struct AcceleratorSpec {
    /// Selection name.
    pub name: &'static str,
    /// One line for `--help`.
    pub description: &'static str,
    /// Family.
    pub kind: AcceleratorKind,
    /// Priority for `accelerator=auto`; `None`: never picked automatically.
    pub auto_priority: Option<u32>,
    /// Precisions it can run.
    pub precisions: &'static [Precision],
    /// Number of devices present on this machine (0: unavailable). Touches no device memory.
    pub probe: fn() -> usize,
    /// The accelerator's device rule.
    pub parse_devices: fn(&DevicesFlag, usize) -> Result<Vec<usize>, String>,
    /// Whether it can honour `deterministic=true` (the error says why not).
    pub deterministic: fn() -> Result<(), String>,
}

impl AcceleratorSpec {
    /// The spec of accelerator `A`.
    pub fn of<A: Accelerator>() -> Self {
        Self {
            name: A::name(),
            description: A::description(),
            kind: A::kind(),
            auto_priority: A::auto_priority(),
            precisions: A::precisions(),
            probe: probe::<A>,
            parse_devices: A::parse_devices,
            deterministic: A::deterministic,
        }
    }
}

fn probe<A: Accelerator>() -> usize {
    if A::is_available() {
        A::auto_device_count()
    } else {
        0
    }
}

/// Registered accelerators and strategies, in registration order.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Accelerators.
    pub accelerators: Vec<AcceleratorSpec>,
    /// Strategies.
    pub strategies: Vec<StrategyInfo>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            accelerators: Vec::new(),
            strategies: builtin_strategies(),
        }
    }
}

impl Catalog {
    /// The accelerator registered under `name`.
    pub fn accelerator(&self, name: &str) -> Option<&AcceleratorSpec> {
        self.accelerators.iter().find(|a| a.name == name)
    }

    /// The strategy registered under `name` (lowercase).
    pub fn strategy(&self, name: &str) -> Option<&StrategyInfo> {
        self.strategies.iter().find(|s| s.name == name)
    }

    /// `auto, gpu, cpu, cuda, ...`: every name `--trainer.accelerator` accepts.
    pub fn accelerator_choices(&self) -> String {
        list(
            RESERVED_ACCELERATOR_NAMES
                .into_iter()
                .chain(self.accelerators.iter().map(|a| a.name)),
        )
    }

    /// `auto, single_device, ddp, ...`: every name `--trainer.strategy` accepts.
    pub fn strategy_choices(&self) -> String {
        list(std::iter::once("auto").chain(self.strategies.iter().map(|s| s.name.as_str())))
    }
}
