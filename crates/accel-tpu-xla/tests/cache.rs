//! A steady loop through the lazy backend: the same segment structure, each time on other
//! tensors and scalars, is lowered and compiled once and then found by its structure. Its own
//! test binary, so that the process's counters count this loop alone.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_flex::Flex;
use ember_accel_tpu_xla::backend::stats;
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;
use common::values;

/// One step of `w <- w - lr * (x w)`, read back as a training loop reads its loss.
fn step<B: Backend>(w: Tensor<B, 2>, x: &Tensor<B, 2>, lr: f64) -> (Tensor<B, 2>, TensorData) {
    let w = w.clone() - x.clone().matmul(w) * lr;
    let sum = w.clone().sum().into_data();
    (w, sum)
}

#[test]
fn a_repeated_step_is_lowered_once_and_takes_each_steps_scalars() {
    if !common::plugin_found() {
        return;
    }
    let start = TensorData::new(values(16, 1), [4, 4]);
    let dev = XlaDevice::new(0);
    let (mut w, x) = (
        Tensor::<Xla, 2>::from_data(start.clone(), &dev),
        Tensor::<Xla, 2>::from_data(start.clone(), &dev).transpose(),
    );
    let flex = Default::default();
    let (mut w_flex, x_flex) = (
        Tensor::<Flex, 2>::from_data(start.clone(), &flex),
        Tensor::<Flex, 2>::from_data(start, &flex).transpose(),
    );
    let mut per_step = Vec::new();
    for k in 0..6 {
        // A new scalar every step, like Adam's bias correction.
        let lr = 0.1 / (k + 1) as f64;
        let before = stats();
        let (next, sum) = step(w, &x, lr);
        let after = stats();
        per_step.push((
            after.lowerings - before.lowerings,
            after.compiles - before.compiles,
        ));
        let (next_flex, sum_flex) = step(w_flex, &x_flex, lr);
        let (a, b) = (
            sum.to_vec::<f32>().unwrap()[0],
            sum_flex.to_vec::<f32>().unwrap()[0],
        );
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "step {k}: xla {a}, flex {b}"
        );
        (w, w_flex) = (next, next_flex);
    }
    eprintln!("(lowered, compiled) per step: {per_step:?}");
    assert!(
        per_step[2..]
            .iter()
            .all(|&(lowered, compiled)| lowered == 0 && compiled == 0),
        "steps after the second were lowered or compiled again: {per_step:?}"
    );
    let w_final = w.into_data().to_vec::<f32>().unwrap();
    let w_flex = w_flex.into_data().to_vec::<f32>().unwrap();
    for (a, b) in w_final.iter().zip(&w_flex) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{w_final:?} vs {w_flex:?}"
        );
    }
}
