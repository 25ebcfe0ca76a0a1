//! What the connector knows about registered accelerators, strategies, plugins and cluster
//! environments, independent of any job (names, descriptions, rules; no factories).

use std::sync::Arc;

use crate::accelerator::AcceleratorKind;
use crate::check::PlanCheck;
use crate::cluster::{ClusterEnvironment, builtin_environments};
use crate::devices::DevicesFlag;
use crate::error::list;
use crate::init_args::ArgsCheck;
use crate::precision::Precision;
use crate::process_group;
use crate::strategy::StrategyInfo;

/// Names that select accelerators indirectly and so cannot be registered.
pub const RESERVED_ACCELERATOR_NAMES: [&str; 2] = ["auto", "gpu"];

/// ember's own accelerators by name, with the feature of the `ember` crate that builds each
/// in: a program built without it is told which feature to enable.
pub const BUILTIN_ACCELERATOR_FEATURES: [(&str, &str); 6] = [
    ("cpu", "cpu"),
    ("cuda", "cuda"),
    ("wgpu", "wgpu"),
    ("tch-cpu", "tch"),
    ("tch-cuda", "tch"),
    ("xla", "tpu-xla"),
];

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
    /// The name of its collective that sums gradients on the device (`nccl` for cuda), a
    /// process group backend `ddp` can use; `None`: only the host collective.
    pub device_collective: Option<&'static str>,
}

/// What a plugin named in `--trainer.plugins` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// A precision plugin building on this named precision.
    Precision(Precision),
    /// A checkpoint IO.
    CheckpointIo,
}

/// A registered precision plugin or checkpoint IO (cluster environments are listed apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// Selection name (lowercase).
    pub name: String,
    /// One line for `--help`.
    pub description: String,
    /// What it is.
    pub kind: PluginKind,
    /// Its plan-time check; `None` accepts every plan.
    pub check: Option<PlanCheck>,
    /// The `init_args` it takes; `None`: none.
    pub args: Option<ArgsCheck>,
}

/// A precision plugin as the connector knows it before any is built: its name, a description,
/// the named precision it builds on, and what plans it refuses (registered with its factory).
#[derive(Debug, Clone)]
pub struct PrecisionInfo {
    /// Selection name (lowercase), as `--trainer.precision` or `--trainer.plugins` names it.
    pub name: String,
    /// One line for `--help`.
    pub description: String,
    /// The named precision it builds on (what its `precision()` returns): the device's float
    /// type, and f32 master weights for the mixed ones.
    pub base: Precision,
    /// Its plan-time check ([`with_check`](Self::with_check)); `None` accepts every plan.
    pub check: Option<PlanCheck>,
    /// The `init_args` it takes ([`with_args`](Self::with_args)); `None`: none.
    pub args: Option<ArgsCheck>,
}

impl PrecisionInfo {
    /// A precision plugin named `name`, building on `base`.
    pub fn new(name: &str, description: &str, base: Precision) -> Self {
        Self {
            name: name.to_ascii_lowercase(),
            description: description.to_owned(),
            base,
            check: None,
            args: None,
        }
    }

    /// Takes `init_args` that deserialize as `T` (`--trainer.precision='{class_path: NAME,
    /// init_args: {...}}'`, or an entry of `--trainer.plugins`): arguments `T` refuses exit 2
    /// naming the flag and the argument while planning; its factory reads them with
    /// `Plan::init_args`. Without this, `init_args` for it are refused.
    pub fn with_args<T: serde::de::DeserializeOwned>(mut self) -> Self {
        self.args = Some(ArgsCheck::of::<T>());
        self
    }

    /// Refuses plans `check` returns `Err(why)` for: choosing it then exits 2 with `why`
    /// while planning (`--print-plan` shows it), before any process starts.
    ///
    /// ```
    /// # use ember_plan::{Precision, PrecisionInfo};
    /// let info = PrecisionInfo::new("bf16-one", "bf16-mixed, one process", Precision::Bf16Mixed)
    ///     .with_check(|plan| match plan.world_size {
    ///         1 => Ok(()),
    ///         n => Err(format!("it keeps no state across {n} processes")),
    ///     });
    /// ```
    pub fn with_check(
        mut self,
        check: impl Fn(&crate::plan::Plan) -> Result<(), String> + 'static,
    ) -> Self {
        self.check = Some(PlanCheck::new(check));
        self
    }
}

/// A checkpoint IO as the connector knows it before any is built: its name, a description and
/// the `init_args` it takes (registered with its factory).
#[derive(Debug, Clone)]
pub struct CheckpointIoInfo {
    /// Selection name (lowercase), as `--trainer.plugins` names it.
    pub name: String,
    /// One line for `--help`.
    pub description: String,
    /// The `init_args` it takes ([`with_args`](Self::with_args)); `None`: none.
    pub args: Option<ArgsCheck>,
}

impl CheckpointIoInfo {
    /// A checkpoint IO named `name`.
    pub fn new(name: &str, description: &str) -> Self {
        Self {
            name: name.to_ascii_lowercase(),
            description: description.to_owned(),
            args: None,
        }
    }

    /// Takes `init_args` that deserialize as `T` (`--trainer.plugins=[{class_path: NAME,
    /// init_args: {...}}]`): arguments `T` refuses exit 2 naming the flag and the argument
    /// while planning; its factory reads them with `Plan::init_args`. Without this,
    /// `init_args` for it are refused.
    pub fn with_args<T: serde::de::DeserializeOwned>(mut self) -> Self {
        self.args = Some(ArgsCheck::of::<T>());
        self
    }
}

impl From<CheckpointIoInfo> for PluginInfo {
    fn from(info: CheckpointIoInfo) -> Self {
        Self {
            name: info.name,
            description: info.description,
            kind: PluginKind::CheckpointIo,
            check: None,
            args: info.args,
        }
    }
}

impl From<PrecisionInfo> for PluginInfo {
    fn from(info: PrecisionInfo) -> Self {
        Self {
            name: info.name,
            description: info.description,
            kind: PluginKind::Precision(info.base),
            check: info.check,
            args: info.args,
        }
    }
}

impl PluginInfo {
    /// Whether it is a precision plugin under a name of its own, not the plugin of a named
    /// precision (`16-mixed`).
    pub fn is_own_precision_plugin(&self) -> bool {
        matches!(self.kind, PluginKind::Precision(base) if base.name() != self.name)
    }
}

/// Registered accelerators, strategies, plugins, cluster environments, callbacks and loggers,
/// in registration order (ember's own first; an empty catalog knows the built-in cluster
/// environments alone).
#[derive(Clone)]
pub struct Catalog {
    /// Accelerators.
    pub accelerators: Vec<AcceleratorSpec>,
    /// Strategies.
    pub strategies: Vec<StrategyInfo>,
    /// Precision plugins (the six named precisions' among them) and checkpoint IOs registered
    /// by name.
    pub plugins: Vec<PluginInfo>,
    /// Cluster environments in detection order: those the application registered, then the
    /// built-ins (local last).
    pub cluster_environments: Vec<Arc<dyn ClusterEnvironment>>,
    /// Callbacks registered by name, with their descriptions.
    pub callbacks: Vec<(String, String)>,
    /// Loggers registered by name, with their descriptions.
    pub loggers: Vec<(String, String)>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            accelerators: Vec::new(),
            strategies: Vec::new(),
            plugins: Vec::new(),
            cluster_environments: builtin_environments(),
            callbacks: Vec::new(),
            loggers: Vec::new(),
        }
    }
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("accelerators", &self.accelerators)
            .field("strategies", &self.strategies)
            .field("plugins", &self.plugins)
            .field("callbacks", &self.callbacks)
            .field("loggers", &self.loggers)
            .field(
                "cluster_environments",
                &self.cluster_environment_names().collect::<Vec<_>>(),
            )
            .finish()
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

    /// The precision plugin or checkpoint IO registered under `name` (lowercase).
    pub fn plugin(&self, name: &str) -> Option<&PluginInfo> {
        self.plugins.iter().find(|p| p.name == name)
    }

    /// The cluster environment registered under `name` (lowercase).
    pub fn cluster_environment(&self, name: &str) -> Option<&Arc<dyn ClusterEnvironment>> {
        self.cluster_environments.iter().find(|e| e.name() == name)
    }

    /// Cluster environment names, in detection order.
    pub fn cluster_environment_names(&self) -> impl Iterator<Item = &str> {
        self.cluster_environments.iter().map(|e| e.name())
    }

    /// Every process group backend name `--trainer.plugins` accepts: `mpi`, then the
    /// registered accelerators' device collectives.
    pub fn process_group_backends(&self) -> Vec<&'static str> {
        let mut names = vec![process_group::MPI];
        for name in self.accelerators.iter().filter_map(|a| a.device_collective) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// Every name `--trainer.plugins` accepts, by kind: registered plugins, cluster
    /// environments, process group backends. Each name is listed once, as what it selects
    /// there: `mpi` is the process group backend (the `mpi` cluster environment is chosen with
    /// `--trainer.cluster_environment=mpi` or detected).
    pub fn plugin_choices(&self) -> String {
        let backends = self.process_group_backends();
        let environments = self
            .cluster_environment_names()
            .filter(|n| !backends.contains(n))
            .collect();
        let plugins = self.plugins.iter().map(|p| p.name.as_str()).collect();
        [
            ("precision plugins and checkpoint IOs", plugins),
            ("cluster environments", environments),
            ("process group backends", backends),
        ]
        .into_iter()
        .filter(|(_, names): &(_, Vec<&str>)| !names.is_empty())
        .map(|(what, names)| format!("{what}: {}", list(names)))
        .collect::<Vec<_>>()
        .join("; ")
    }

    /// The names of the precision plugins registered under names of their own (not the six
    /// named precisions'), in registration order.
    pub fn precision_plugin_names(&self) -> impl Iterator<Item = &str> {
        self.plugins
            .iter()
            .filter(|p| p.is_own_precision_plugin())
            .map(|p| p.name.as_str())
    }

    /// The precision plugin `name` selects as a name of its own: not one of the six named
    /// precisions (those select the plugin registered under them, the plan's default).
    pub fn own_precision_plugin(&self, name: &str) -> Option<&PluginInfo> {
        self.plugin(name).filter(|p| p.is_own_precision_plugin())
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
