//! The accelerator seam: a burn backend type on one side, a run-time name on the other.

use std::collections::BTreeMap;
use std::rc::Rc;

use burn::tensor::Device;
use burn::tensor::backend::AutodiffBackend;

use crate::catalog::AcceleratorSpec;
use crate::collective::Collective;
use crate::devices::{self, DevicesFlag};
use crate::plugins::device_reduce::DeviceCollective;
use ember_plan::precision::Precision;

pub use ember_plan::accelerator::{AcceleratorKind, check_deterministic};

/// The device type of an accelerator's backend.
pub type DeviceOf<A> = Device<<A as Accelerator>::Backend>;

/// Per-device figures for the DeviceStatsMonitor, e.g. `memory_used_bytes`.
pub type DeviceStats = BTreeMap<String, f64>;

/// A hardware family that ember can train on, bound to one burn backend type.
///
/// Implement it to add an accelerator (see `docs/custom-accelerator.md`); register it with
/// [`Registry::register`](crate::Registry::register) and it becomes selectable as
/// `--trainer.accelerator=NAME`. Probing functions must not panic when the hardware or its
/// driver is missing: they report "not available" instead.
pub trait Accelerator: 'static {
    /// The autodiff backend models train on, e.g. `Autodiff<Flex>`.
    type Backend: AutodiffBackend;

    /// The name users select it by (lowercase, no spaces).
    fn name() -> &'static str;

    /// One line for `--help` and error messages.
    fn description() -> &'static str;

    /// The family; decides default device rules and `gpu` eligibility.
    fn kind() -> AcceleratorKind;

    /// Priority for `accelerator=auto` (higher wins); `None` means auto never picks it.
    fn auto_priority() -> Option<u32> {
        None
    }

    /// Whether the hardware and its driver are present. Must not panic.
    fn is_available() -> bool;

    /// How many devices exist (0 when unavailable).
    fn auto_device_count() -> usize;

    /// Turns the `devices` flag into device ids, given how many devices exist.
    /// The error says what is allowed; the connector names the flag and value.
    fn parse_devices(flag: &DevicesFlag, available: usize) -> Result<Vec<usize>, String> {
        match Self::kind() {
            AcceleratorKind::Cpu => devices::cpu_devices(flag),
            AcceleratorKind::Tpu => devices::tpu_devices(flag, available),
            AcceleratorKind::Gpu | AcceleratorKind::Other => devices::gpu_devices(flag, available),
        }
    }

    /// The backend devices for the given ids, in order.
    fn parallel_devices(ids: &[usize]) -> Vec<DeviceOf<Self>>;

    /// One backend device that drives all of `ids` from this process (a strategy with one
    /// process per node, `xla`); the error says why this accelerator has none.
    fn spanning_device(ids: &[usize]) -> Result<DeviceOf<Self>, String> {
        let _ = ids;
        Err(format!(
            "accelerator {} drives one device per process",
            Self::name()
        ))
    }

    /// Figures about one device for monitoring (memory, utilisation ...).
    fn device_stats(device: &DeviceOf<Self>) -> DeviceStats;

    /// Whether its kernels give bitwise reproducible results (`--trainer.deterministic=true`);
    /// the error says why not.
    fn deterministic() -> Result<(), String> {
        Err("no deterministic mode is known for this backend".into())
    }

    /// The precisions this accelerator's registered backends can run today.
    fn precisions() -> &'static [Precision] {
        &[Precision::F32True]
    }

    /// Told around each batch a Trainer's loops make on `device`: the batch's item count
    /// before its batcher runs, `None` after. An accelerator whose device spans several
    /// splits the tensors of that many rows made in between by rows over them (xla); by
    /// default nothing.
    fn batch_scope(device: &DeviceOf<Self>, rows: Option<usize>) {
        let _ = (device, rows);
    }

    /// Installs this accelerator's fused kernels for ember's layers ([`crate::nn`]) with
    /// [`install_batch_norm`](crate::nn::install_batch_norm) and its kin; called each time a
    /// Trainer is built on it. By default none: the layers compose burn's tensor ops.
    fn install_kernels() {}

    /// The name of the collective that sums `ddp`'s gradients on this accelerator's devices
    /// (`nccl` for cuda), selectable as `--trainer.plugins=[NAME]` and the default process
    /// group backend of `ddp` here; `None` (the default): gradients go through the host
    /// collective of the engine that started the ranks.
    fn device_collective_name() -> Option<&'static str> {
        None
    }

    /// Builds the device collective for this process, on `device`, bootstrapped over the
    /// `host` collective (e.g. rank 0's NCCL unique id broadcast to the others). Called once
    /// per Trainer, only when the plan chose [`device_collective_name`](Self::device_collective_name).
    fn device_collective(
        host: Rc<dyn Collective>,
        device: &DeviceOf<Self>,
    ) -> anyhow::Result<Box<dyn DeviceCollective>> {
        let _ = (host, device);
        anyhow::bail!("accelerator {} has no device collective", Self::name())
    }
}

/// The connector's view of accelerator `A`: its names, rules and probe, without its backend.
pub fn spec<A: Accelerator>() -> AcceleratorSpec {
    AcceleratorSpec {
        name: A::name(),
        description: A::description(),
        kind: A::kind(),
        auto_priority: A::auto_priority(),
        precisions: A::precisions(),
        probe: probe::<A>,
        parse_devices: A::parse_devices,
        deterministic: A::deterministic,
        device_collective: A::device_collective_name(),
    }
}

fn probe<A: Accelerator>() -> usize {
    if A::is_available() {
        A::auto_device_count()
    } else {
        0
    }
}
