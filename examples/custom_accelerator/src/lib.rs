//! An out-of-tree accelerator: `xpu`, defined and registered entirely in the user's program.
//!
//! It wraps burn's Flex CPU backend under its own name, and brings its own device rules: an XPU
//! host has a fixed number of slots (`XPU_SLOTS`, default 4), and a run must ask for them
//! explicitly — `devices=-1` and `auto` are refused so that a shared host is never taken whole
//! by accident. See `docs/custom-accelerator.md`.

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::accelerator::{AcceleratorKind, DeviceStats, gpu_devices};
use ember::{Accelerator, DevicesFlag};

/// Variable that sets how many XPU slots this host has.
pub const SLOTS_VAR: &str = "XPU_SLOTS";

/// The example accelerator.
pub struct XpuAccelerator;

impl Accelerator for XpuAccelerator {
    type Backend = Autodiff<Flex>;

    fn name() -> &'static str {
        "xpu"
    }

    fn description() -> &'static str {
        "example out-of-tree accelerator: CPU slots with explicit-only device rules"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Other
    }

    fn is_available() -> bool {
        Self::auto_device_count() > 0
    }

    fn auto_device_count() -> usize {
        std::env::var(SLOTS_VAR)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4)
    }

    fn parse_devices(flag: &DevicesFlag, available: usize) -> Result<Vec<usize>, String> {
        match flag {
            DevicesFlag::Auto | DevicesFlag::Count(-1) => Err(format!(
                "xpu slots must be asked for explicitly: a count in 1..={available} or a list of slot ids"
            )),
            other => gpu_devices(other, available),
        }
    }

    fn parallel_devices(ids: &[usize]) -> Vec<FlexDevice> {
        ids.iter().map(|_| FlexDevice).collect()
    }

    fn device_stats(_device: &FlexDevice) -> DeviceStats {
        ember::cpu::process_stats()
    }
}
