//! Op parity: each case runs the same burn code on burn-flex and on the xla backend (CPU
//! plugin) and compares the results.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData, Tolerance};
use burn_autodiff::Autodiff;
use burn_flex::Flex;
use ember_accel_tpu_xla::{Xla, XlaDevice, pjrt::plugin};

fn available() -> bool {
    match plugin::find() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skip: {e}");
            false
        }
    }
}

/// Deterministic inputs: the same host data on both backends.
fn input<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let n: usize = shape.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let values: Vec<f32> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn compare(name: &str, flex: Vec<TensorData>, xla: Vec<TensorData>) {
    assert_eq!(flex.len(), xla.len(), "{name}: result count");
    for (i, (a, b)) in flex.iter().zip(&xla).enumerate() {
        assert_eq!(a.shape, b.shape, "{name}[{i}]: shape");
        let a = a.clone().convert::<f32>();
        let b = b.clone().convert::<f32>();
        a.assert_approx_eq::<f32>(&b, Tolerance::rel_abs(1e-4, 1e-5));
    }
}

macro_rules! parity {
    ($name:ident, |$dev:ident| $body:block) => {
        #[test]
        fn $name() {
            if !available() {
                return;
            }
            fn run<B: Backend>($dev: &B::Device) -> Vec<TensorData> $body
            let flex = run::<Flex>(&Default::default());
            let before = ember_accel_tpu_xla::backend::stats().executions;
            let xla = run::<Xla>(&XlaDevice::new(0));
            assert!(
                ember_accel_tpu_xla::backend::stats().executions > before,
                "nothing ran through PJRT"
            );
            compare(stringify!($name), flex, xla);
        }
    };
}

parity!(elementwise_and_reductions, |dev| {
    let a = input::<B, 2>([4, 5], 1, dev);
    let b = input::<B, 2>([4, 5], 2, dev);
    vec![
        (a.clone() + b.clone()).into_data(),
        (a.clone() * b.clone() - a.clone() / (b.clone().abs() + 1.0)).into_data(),
        a.clone().exp().into_data(),
        (a.clone().abs() + 0.5).log().into_data(),
        (a.clone().abs()).sqrt().into_data(),
        a.clone().sum_dim(1).into_data(),
        a.clone().mean().into_data(),
        a.clone().max_dim(0).into_data(),
        a.clone().argmax(1).into_data(),
        a.clone().lower_equal_elem(0.3).int().into_data(),
        a.clone().matmul(b.clone().transpose()).into_data(),
        burn::tensor::activation::log_softmax(a.clone(), 1).into_data(),
        a.clone().powf_scalar(2.0).into_data(),
        a.clone().recip().into_data(),
        a.clone()
            .mask_fill(b.clone().greater_elem(0.0), -1.5)
            .into_data(),
        a.clone().clamp(-0.5, 0.5).into_data(),
        a.clone().slice([1..3, 0..5]).into_data(),
        Tensor::cat(vec![a.clone(), b.clone()], 0).into_data(),
        a.clone().reshape([5, 4]).swap_dims(0, 1).into_data(),
        a.clone().repeat_dim(0, 2).into_data(),
        a.clone().erf().into_data(),
        a.clone().tanh().into_data(),
    ]
});

parity!(gather_scatter_select, |dev| {
    let a = input::<B, 2>([4, 5], 3, dev);
    let idx = Tensor::<B, 2, Int>::from_data(
        TensorData::new(vec![0i32, 4, 2, 1, 1, 3, 0, 0], [4, 2]),
        dev,
    );
    let rows = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![3i32, 0, 3], [3]), dev);
    let v = input::<B, 2>([4, 2], 4, dev);
    let w = input::<B, 2>([3, 5], 5, dev);
    vec![
        a.clone().gather(1, idx.clone()).into_data(),
        a.clone()
            .scatter(1, idx, v, burn::tensor::IndexingUpdateOp::Add)
            .into_data(),
        a.clone().select(0, rows.clone()).into_data(),
        a.clone()
            .select_assign(0, rows, w, burn::tensor::IndexingUpdateOp::Add)
            .into_data(),
    ]
});

parity!(mlp_training_step, |dev| {
    type A<B> = Autodiff<B>;
    let x = input::<A<B>, 2>([8, 6], 6, dev);
    let w1 = input::<A<B>, 2>([6, 16], 7, dev).require_grad();
    let b1 = input::<A<B>, 1>([16], 8, dev).require_grad();
    let w2 = input::<A<B>, 2>([16, 3], 9, dev).require_grad();
    let h = burn::tensor::activation::relu(x.matmul(w1.clone()) + b1.clone().unsqueeze());
    let logits = h.matmul(w2.clone());
    let targets = Tensor::<A<B>, 1, Int>::from_data(
        TensorData::new(vec![0i32, 1, 2, 0, 1, 2, 0, 1], [8]),
        dev,
    );
    let loss = burn::nn::loss::CrossEntropyLossConfig::new()
        .init(dev)
        .forward(logits, targets);
    let grads = loss.backward();
    vec![
        loss.into_data(),
        w1.grad(&grads).unwrap().into_data(),
        b1.grad(&grads).unwrap().into_data(),
        w2.grad(&grads).unwrap().into_data(),
    ]
});

#[test]
fn random_tensors_follow_the_seed() {
    if !available() {
        return;
    }
    let dev = XlaDevice::new(0);
    Xla::seed(&dev, 7);
    let a = Tensor::<Xla, 2>::random([3, 4], Distribution::Default, &dev).into_data();
    Xla::seed(&dev, 7);
    let b = Tensor::<Xla, 2>::random([3, 4], Distribution::Default, &dev).into_data();
    assert_eq!(a, b);
}
