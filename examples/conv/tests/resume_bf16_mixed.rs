//! A conv fit in bf16-mixed stopped mid-epoch resumes bitwise: Adam's moments come back in the
//! f32 of the master weights (tests/common/mod.rs).

mod common;

use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision};

#[test]
fn a_resumed_conv_fit_continues_bitwise_in_bf16_mixed() {
    common::resumes_bitwise::<CpuAccelerator>(&Plan::local("cpu", Precision::Bf16Mixed));
}
