//! Where the lazy backend ends a step when nothing is read: at `mark_step`, or when a loader
//! makes the next batch. Each step is started without waiting for it, and the values that come
//! back at the end are the ones eager burn-flex computes. Its own test binary, so that the
//! process's counters count this loop alone.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_flex::Flex;
use ember_accel_tpu_xla::backend::{making_batch, mark_step, stats};
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;
use common::values;

/// `w <- w - lr * (x w)`, reading nothing.
fn step<B: Backend>(w: Tensor<B, 2>, x: &Tensor<B, 2>, lr: f64) -> Tensor<B, 2> {
    w.clone() - x.clone().matmul(w) * lr
}

#[test]
fn steps_end_at_mark_step_or_the_next_batch_and_run_without_a_read() {
    if !common::plugin_found() {
        return;
    }
    let start = TensorData::new(values(16, 1), [4, 4]);
    let next = TensorData::new(values(16, 2), [4, 4]);
    let dev = XlaDevice::new(0);
    let flex = Default::default();
    let mut w = Tensor::<Xla, 2>::from_data(start.clone(), &dev);
    let mut w_flex = Tensor::<Flex, 2>::from_data(start.clone(), &flex);
    let mut x = Tensor::<Xla, 2>::from_data(start.clone(), &dev).transpose();
    let mut x_flex = Tensor::<Flex, 2>::from_data(start.clone(), &flex).transpose();
    let mut started = Vec::new();
    for k in 0..8 {
        let lr = 0.1 / (k + 1) as f64;
        let before = stats().executions;
        w = step(w, &x, lr);
        w_flex = step(w_flex, &x_flex, lr);
        let recorded = stats().executions - before;
        if k % 2 == 0 {
            mark_step(&dev);
        } else {
            // The next batch, made as the Trainer's loaders make it.
            let batch = next.clone();
            x = making_batch(&dev, 4, || Tensor::<Xla, 2>::from_data(batch.clone(), &dev));
            x_flex = Tensor::<Flex, 2>::from_data(batch, &flex);
        }
        started.push((recorded, stats().executions - before));
    }
    assert_eq!(
        started,
        vec![(0, 1); 8],
        "(programs run while recording a step, then by its end) per step"
    );
    Xla::sync(&dev).expect("every started step finishes");
    let got = w.into_data().to_vec::<f32>().unwrap();
    let want = w_flex.into_data().to_vec::<f32>().unwrap();
    for (a, b) in got.iter().zip(&want) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}
