//! A conv fit in 64-true stopped mid-epoch resumes bitwise: Adam's moments are stored in f64
//! (burn's own record would round them to f32) (tests/common/mod.rs).

mod common;

use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision};

#[test]
fn a_resumed_conv_fit_continues_bitwise_in_64_true() {
    common::resumes_bitwise::<CpuAccelerator>(&Plan::local("cpu", Precision::F64True));
}
