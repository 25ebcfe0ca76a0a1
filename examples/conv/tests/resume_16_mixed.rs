//! A conv fit in 16-mixed (f16 compute, f32 masters, dynamic loss scaling) stopped mid-epoch
//! resumes bitwise, the scaler's state included (tests/common/mod.rs). The cpu accelerator
//! runs 16-mixed as bf16-mixed, so this runs on `HalfCpu`, burn-flex declared with 16-mixed.

mod common;

use ember::{Plan, Precision};
use ember_acceptance::HalfCpu;

#[test]
fn a_resumed_conv_fit_continues_bitwise_in_16_mixed() {
    common::resumes_bitwise::<HalfCpu>(&Plan::local("halfcpu", Precision::F16Mixed));
}
