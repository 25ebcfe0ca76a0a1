//! A conv fit in 16-mixed (f16 compute, f32 masters, dynamic loss scaling) stopped mid-epoch
//! resumes bitwise, the scaler's state included (tests/common/mod.rs). The cpu accelerator
//! runs 16-mixed as bf16-mixed, so this declares burn-flex as an accelerator that runs it.

mod common;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::{Accelerator, AcceleratorKind, DeviceStats, Plan, Precision};

/// burn-flex declared as an accelerator that runs 16-mixed.
struct HalfCpu;

impl Accelerator for HalfCpu {
    type Backend = Autodiff<Flex>;
    fn name() -> &'static str {
        "halfcpu"
    }
    fn description() -> &'static str {
        "burn-flex with 16-mixed, for the resume test"
    }
    fn kind() -> AcceleratorKind {
        AcceleratorKind::Other
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
        &[Precision::F16Mixed]
    }
}

#[test]
fn a_resumed_conv_fit_continues_bitwise_in_16_mixed() {
    common::resumes_bitwise::<HalfCpu>(&Plan::local("halfcpu", Precision::F16Mixed));
}
