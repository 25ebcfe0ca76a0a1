//! A conv fit in 32-true stopped mid-epoch resumes bitwise (tests/common/mod.rs).

mod common;

use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision};

#[test]
fn a_resumed_conv_fit_continues_bitwise_in_32_true() {
    common::resumes_bitwise::<CpuAccelerator>(&Plan::local("cpu", Precision::F32True));
}
