//! Op parity: each case runs the same burn code on burn-flex and on the xla backend (CPU
//! plugin) and compares the results.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_flex::Flex;
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;

/// Deterministic inputs: the same host data on both backends.
fn input<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    device: &B::Device,
) -> Tensor<B, D> {
    let n: usize = shape.iter().product();
    Tensor::from_data(TensorData::new(common::values(n, seed), shape), device)
}

/// Compares each result within a tolerance scaled to the tensor's magnitude: XLA fuses and
/// reorders sums, so the last bits differ from burn-flex's.
fn compare(name: &str, flex: Vec<TensorData>, xla: Vec<TensorData>, tolerance: f32) {
    assert_eq!(flex.len(), xla.len(), "{name}: result count");
    for (i, (a, b)) in flex.iter().zip(&xla).enumerate() {
        assert_eq!(a.shape, b.shape, "{name}[{i}]: shape");
        let a = a.clone().convert::<f32>().to_vec::<f32>().unwrap();
        let b = b.clone().convert::<f32>().to_vec::<f32>().unwrap();
        let scale = a.iter().fold(1f32, |m, v| m.max(v.abs()));
        let (at, diff) = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .enumerate()
            .fold((0, 0f32), |best, (j, d)| {
                if d > best.1 || d.is_nan() {
                    (j, d)
                } else {
                    best
                }
            });
        assert!(
            diff <= tolerance * scale,
            "{name}[{i}]: flex {} vs xla {} at {at} (scale {scale})",
            a[at],
            b[at]
        );
    }
}

/// Random ops draw from one process-wide stream on each backend: tests that seed it run one at
/// a time.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

macro_rules! parity {
    ($name:ident, |$dev:ident| $body:block) => {
        parity!($name, tolerance = 4e-5, |$dev| $body);
    };
    ($name:ident, tolerance = $tol:expr, |$dev:ident| $body:block) => {
        #[test]
        fn $name() {
            if !common::plugin_found() {
                return;
            }
            fn run<B: Backend>($dev: &B::Device) -> Vec<TensorData> $body
            let _one_at_a_time = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
            let flex = run::<Flex>(&Default::default());
            let before = ember_accel_tpu_xla::backend::stats().executions;
            let xla = run::<Xla>(&XlaDevice::new(0));
            assert!(
                ember_accel_tpu_xla::backend::stats().executions > before,
                "nothing ran through PJRT"
            );
            compare(stringify!($name), flex, xla, $tol);
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
    if !common::plugin_found() {
        return;
    }
    let _one_at_a_time = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    let dev = XlaDevice::new(0);
    Xla::seed(&dev, 7);
    let a = Tensor::<Xla, 2>::random([3, 4], Distribution::Default, &dev).into_data();
    Xla::seed(&dev, 7);
    let b = Tensor::<Xla, 2>::random([3, 4], Distribution::Default, &dev).into_data();
    assert_eq!(a, b);
}

// The conv example's layers and their gradients: Conv2d (padding, stride, groups), BatchNorm in
// training mode, max/avg/adaptive pooling, Dropout (masks drawn from the seeded stream on
// both backends).
parity!(conv_layers_forward_and_backward, |dev| {
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::pool::{AdaptiveAvgPool2dConfig, AvgPool2dConfig, MaxPool2dConfig};
    use burn::nn::{BatchNormConfig, DropoutConfig, PaddingConfig2d};
    type A<B> = Autodiff<B>;
    B::seed(dev, 11);
    let x = input::<A<B>, 4>([2, 4, 9, 9], 12, dev).require_grad();
    let conv = Conv2dConfig::new([4, 6], [3, 3])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_stride([2, 1])
        .with_groups(2)
        .init::<A<B>>(dev);
    let norm = BatchNormConfig::new(6).init::<A<B>>(dev);
    let y = norm.forward(conv.forward(x.clone()));
    let max = MaxPool2dConfig::new([2, 2]).init().forward(y.clone());
    let avg = AvgPool2dConfig::new([3, 3])
        .with_strides([2, 2])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .init()
        .forward(y.clone());
    let adaptive = AdaptiveAvgPool2dConfig::new([2, 3])
        .init()
        .forward(y.clone());
    let dropped = DropoutConfig::new(0.3).init().forward(y.clone());
    let loss = max.clone().sum()
        + avg.clone().powf_scalar(2.0).sum()
        + adaptive.clone().sum()
        + dropped.clone().mean();
    let grads = loss.backward();
    vec![
        y.into_data(),
        max.into_data(),
        avg.into_data(),
        adaptive.into_data(),
        dropped.into_data(),
        x.grad(&grads).unwrap().into_data(),
        conv.weight.grad(&grads).unwrap().into_data(),
        conv.bias
            .as_ref()
            .unwrap()
            .grad(&grads)
            .unwrap()
            .into_data(),
        norm.gamma.grad(&grads).unwrap().into_data(),
    ]
});

// The layers a user reaches for next: embedding, layer norm, GELU, softmax, attention. The
// gradients go through GELU's, which differ by design: burn-router (under xla) uses burn's
// default `gelu_backward`, the tanh approximation, and burn-flex the exact derivative (up to
// ~1e-3 apart); the forward values agree to ~2e-7.
parity!(
    transformer_layers_forward_and_backward,
    tolerance = 2e-3,
    |dev| {
        use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
        use burn::nn::{EmbeddingConfig, LayerNormConfig};
        type A<B> = Autodiff<B>;
        B::seed(dev, 21);
        let tokens = Tensor::<A<B>, 2, Int>::from_data(
            TensorData::new(vec![1i32, 5, 7, 7, 0, 3, 9, 2], [2, 4]),
            dev,
        );
        let embedding = EmbeddingConfig::new(10, 8).init::<A<B>>(dev);
        let norm = LayerNormConfig::new(8).init::<A<B>>(dev);
        let mha = MultiHeadAttentionConfig::new(8, 2)
            .with_dropout(0.0)
            .init::<A<B>>(dev);
        let h = norm.forward(embedding.forward(tokens));
        let h = burn::tensor::activation::gelu(h);
        let attended = mha.forward(MhaInput::self_attn(h.clone())).context;
        let probs = burn::tensor::activation::softmax(attended.clone(), 2);
        let loss = (probs.clone() * attended.clone()).sum();
        let grads = loss.backward();
        vec![
            h.into_data(),
            attended.into_data(),
            probs.into_data(),
            embedding.weight.grad(&grads).unwrap().into_data(),
            norm.gamma.grad(&grads).unwrap().into_data(),
            mha.query.weight.grad(&grads).unwrap().into_data(),
        ]
    }
);

// Edge cases of the index rules: argmax ties (first index), negative integer division and
// remainder signs, negative-step slices, flips.
parity!(edge_cases, |dev| {
    let ties = Tensor::<B, 2>::from_data(
        TensorData::new(vec![1.0f32, 3.0, 3.0, 0.0, 2.0, 2.0], [2, 3]),
        dev,
    );
    let a = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![-7i32, 7, -7, 7, 5], [5]), dev);
    let b = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![2i32, -2, -2, 2, 3], [5]), dev);
    let x = input::<B, 2>([4, 6], 31, dev);
    vec![
        ties.clone().argmax(1).into_data(),
        ties.clone().argmin(1).into_data(),
        (a.clone() / b.clone()).into_data(),
        a.clone().remainder(b.clone()).into_data(),
        x.clone().slice(burn::tensor::s![.., 5..0;-2]).into_data(),
        x.clone().flip([0, 1]).into_data(),
        x.clone().cumsum(1).into_data(),
        x.clone().sort(1).into_data(),
    ]
});

#[test]
fn an_op_not_lowered_is_an_error_naming_it_and_only_its_dependents_fail() {
    if !common::plugin_found() {
        return;
    }
    let dev = XlaDevice::new(0);
    let x = input::<Xla, 2>([3, 4], 50, &dev);
    // Recorded in the same segment as the op that fails: one independent of it, one reading
    // its result.
    let independent = x.clone() * 2.0;
    let top = x.clone().topk(2, 1);
    let dependent = top.clone() + 1.0;
    let err = top.try_into_data().expect_err("top_k is not lowered");
    assert!(err.to_string().contains("top_k"), "{err}");
    let err = dependent.try_into_data().expect_err("reads top_k's result");
    assert!(err.to_string().contains("top_k"), "{err}");
    let expected: Vec<f32> = x.into_data().to_vec::<f32>().unwrap();
    let doubled: Vec<f32> = expected.iter().map(|v| v * 2.0).collect();
    assert_eq!(independent.into_data().to_vec::<f32>().unwrap(), doubled);
    // The device is still usable afterwards.
    let y = input::<Xla, 1>([3], 51, &dev);
    assert_eq!(
        (y.clone() - y).into_data().to_vec::<f32>().unwrap(),
        vec![0.0; 3]
    );
}
