//! Helpers for ember's acceptance suite.
//!
//! The suite runs once per backend feature (`cargo xtask test-matrix`). Selection rules are
//! driven through the pure connector with injected inventories, so they run on any machine.
//! Accelerators whose feature is off in this build are stood in for by planning-only fakes
//! with the same name, kind and device rules; with the feature on, the real one is used.

pub mod checkpoints;
pub mod docs;
pub mod fault;
pub mod pair;
pub mod powerloss;
pub mod process;
pub mod regression;
pub mod resume;
pub mod tuned;
pub mod wide;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::accelerator::{AcceleratorKind, DeviceStats};
use ember::plugins::Env;
use ember::{
    Accelerator, Cli, CliOutcome, FlagError, Job, Plan, Precision, Registry, RunContext,
    TrainerFlags,
};

/// A job that reports which accelerator type it was monomorphized for.
pub struct WhoRuns;

impl Job for WhoRuns {
    type Output = (&'static str, &'static str);
    fn run<A: Accelerator>(self, _context: &RunContext) -> anyhow::Result<Self::Output> {
        Ok((A::name(), std::any::type_name::<A::Backend>()))
    }
}

/// Defines a planning-only accelerator: real metadata and device rules, no hardware.
macro_rules! planning_only {
    ($ty:ident, $name:literal, $kind:expr, $priority:expr) => {
        #[doc = concat!("A planning-only stand-in for the `", $name, "` accelerator.")]
        pub struct $ty;
        impl Accelerator for $ty {
            type Backend = Autodiff<Flex>;
            fn name() -> &'static str {
                $name
            }
            fn description() -> &'static str {
                concat!("planning-only stand-in for ", $name)
            }
            fn kind() -> AcceleratorKind {
                $kind
            }
            fn auto_priority() -> Option<u32> {
                $priority
            }
            fn is_available() -> bool {
                false
            }
            fn auto_device_count() -> usize {
                0
            }
            fn parallel_devices(ids: &[usize]) -> Vec<FlexDevice> {
                ids.iter().map(|_| FlexDevice).collect()
            }
            fn device_stats(_: &FlexDevice) -> DeviceStats {
                DeviceStats::new()
            }
        }
    };
}

planning_only!(PlannedTpu, "tpu", AcceleratorKind::Tpu, Some(30));
#[cfg(not(feature = "cuda"))]
planning_only!(PlannedCuda, "cuda", AcceleratorKind::Gpu, Some(20));
#[cfg(not(feature = "wgpu"))]
planning_only!(PlannedWgpu, "wgpu", AcceleratorKind::Gpu, Some(10));

/// Defines burn-flex declared as an accelerator of `kind` that runs `precisions`.
macro_rules! flex_with {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $kind:expr, $precisions:expr) => {
        $(#[$doc])*
        pub struct $ty;
        impl Accelerator for $ty {
            type Backend = Autodiff<Flex>;
            fn name() -> &'static str {
                $name
            }
            fn description() -> &'static str {
                concat!("burn-flex as ", $name, ", for tests")
            }
            fn kind() -> AcceleratorKind {
                $kind
            }
            fn is_available() -> bool {
                true
            }
            fn auto_device_count() -> usize {
                1
            }
            fn parallel_devices(ids: &[usize]) -> Vec<FlexDevice> {
                ids.iter().map(|_| FlexDevice).collect()
            }
            fn device_stats(_: &FlexDevice) -> DeviceStats {
                DeviceStats::new()
            }
            fn precisions() -> &'static [Precision] {
                $precisions
            }
        }
    };
}

flex_with!(
    /// A CPU-kind accelerator that can run bf16-mixed, to check the 16-mixed → bf16-mixed rule.
    MixedCpu,
    "mixedcpu",
    AcceleratorKind::Cpu,
    &[Precision::F32True, Precision::Bf16Mixed]
);

flex_with!(
    /// burn-flex declared as an accelerator that runs 16-mixed (the cpu accelerator runs
    /// 16-mixed as bf16-mixed and needs no loss scaler), for loss-scaling and resume tests.
    HalfCpu,
    "halfcpu",
    AcceleratorKind::Other,
    &[Precision::F32True, Precision::F16Mixed]
);

/// Runs the binary at `program` with `args` in `dir`, planned as a CPU-only machine
/// (`EMBER_INVENTORY=`), so the assertions hold on machines with GPUs or lavapipe too.
pub fn run_cpu_only(program: &str, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .output()
        .expect("the binary runs")
}

/// A metric's value in `fit`'s report line (`trained … ; val_acc 0.9749; val_loss …`).
pub fn reported(stdout: &str, metric: &str) -> Option<f64> {
    stdout
        .rsplit(&format!("; {metric} "))
        .next()
        .and_then(|rest| rest.split(';').next())
        .and_then(|v| v.trim().parse().ok())
}

/// Whether OpenMPI's mpirun runs here; prints a skip message when it does not (the tests that
/// start ranks return early then).
pub fn mpirun_available() -> bool {
    let found = std::process::Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: OpenMPI's mpirun is not installed (scripts/setup.sh installs it)");
    }
    found
}

/// This build's registry (real accelerators of the enabled features) plus stand-ins for
/// tpu and for cuda/wgpu when their features are off.
pub fn registry<J: Job>() -> Registry<J> {
    let r = ember::registry::<J>()
        .register::<PlannedTpu>()
        .expect("tpu is free");
    #[cfg(not(feature = "cuda"))]
    let r = r.register::<PlannedCuda>().expect("cuda is free");
    #[cfg(not(feature = "wgpu"))]
    let r = r.register::<PlannedWgpu>().expect("wgpu is free");
    r
}

/// An environment snapshot from `KEY=VALUE` pairs.
pub fn env(pairs: &[(&str, &str)]) -> Env {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Plans `flags` with an injected inventory (`"cuda=4,wgpu=1"`; `""` is cpu only).
pub fn plan_with(flags: &TrainerFlags, inventory: &str, env: &Env) -> Result<Plan, FlagError> {
    registry::<WhoRuns>().plan(flags, &injected(inventory, env))
}

/// `env` with `EMBER_INVENTORY` set to `inventory` (`"cuda=4,wgpu=1"`; `""` is cpu only):
/// a machine described rather than probed.
pub fn injected(inventory: &str, env: &Env) -> Env {
    let mut env = env.clone();
    env.insert("EMBER_INVENTORY".to_owned(), inventory.to_owned());
    env
}

/// Plans `flags` with an injected inventory and no cluster variables.
pub fn plan(flags: &TrainerFlags, inventory: &str) -> Result<Plan, FlagError> {
    plan_with(flags, inventory, &Env::new())
}

/// Runs `args` (after the program name) through a CLI with empty model and data sections and
/// `registry`, as `ember::run` would, with environment `env`.
pub fn execute<J: Job>(
    registry: &Registry<J>,
    args: &[&str],
    env: &Env,
    job: impl FnOnce() -> J,
) -> CliOutcome<J::Output> {
    type Section = std::collections::BTreeMap<String, String>;
    let argv = std::iter::once("app")
        .chain(args.iter().copied())
        .map(String::from);
    Cli::new("app", "test app", Section::new(), Section::new())
        .execute(argv, env, registry, |_| job())
}

/// The names `fit --help` lists under `heading` (e.g. `Strategies`), each with its description.
pub fn listed<J: Job>(registry: &Registry<J>, heading: &str) -> Vec<(String, String)> {
    let CliOutcome::Printed(help) = execute(registry, &["fit", "--help"], &Env::new(), || {
        unreachable!("help runs no job")
    }) else {
        panic!("fit --help prints its help");
    };
    let start = help
        .find(&format!("\n{heading} ("))
        .unwrap_or_else(|| panic!("no {heading} in\n{help}"));
    help[start + 1..]
        .lines()
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .map(|line| {
            let (name, description) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
            (name.to_owned(), description.trim().to_owned())
        })
        .collect()
}
