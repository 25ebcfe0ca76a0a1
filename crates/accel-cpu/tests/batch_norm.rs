//! ember's `BatchNorm` on the CPU accelerator's fused kernel against burn's `BatchNorm`: the
//! same outputs, gradients and running statistics up to float rounding, whatever the number
//! of threads (bitwise), and the same record.

use burn::module::{AutodiffModule, Module, Param, RunningState};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_flex::FlexDevice;
use ember_accel_cpu::CpuAccelerator;
use ember_core::Accelerator;
use ember_core::nn::BatchNormConfig;

mod common;

use common::{B, input, weighted_sum};

/// What one training step leaves: the output, the gradients of the input, gamma and beta, and
/// the running mean and variance.
type Step = [TensorData; 6];

/// A training step of ember's layer (the kernel installed) on `x`.
fn ember_step<const D: usize>(x: &Tensor<B, D>, channels: usize) -> Step {
    CpuAccelerator::install_kernels();
    let norm = BatchNormConfig::new(channels).init::<B>(&FlexDevice);
    let params = [&norm.gamma, &norm.beta];
    step(x, params, [&norm.running_mean, &norm.running_var], |x| {
        norm.forward(x)
    })
}

/// The same step with burn's layer.
fn burn_step<const D: usize>(x: &Tensor<B, D>, channels: usize) -> Step {
    let norm = burn::nn::BatchNormConfig::new(channels).init::<B>(&FlexDevice);
    let params = [&norm.gamma, &norm.beta];
    step(x, params, [&norm.running_mean, &norm.running_var], |x| {
        norm.forward(x)
    })
}

/// A layer's training step on `x` by `forward`: what it leaves in the output, the gradients of
/// the input and of `params` (gamma, beta), and the `running` mean and variance.
fn step<const D: usize>(
    x: &Tensor<B, D>,
    params: [&Param<Tensor<B, 1>>; 2],
    running: [&RunningState<Tensor<B, 1>>; 2],
    forward: impl FnOnce(Tensor<B, D>) -> Tensor<B, D>,
) -> Step {
    let x = x.clone().require_grad();
    let y = forward(x.clone());
    let grads = weighted_sum(y.clone()).backward();
    [
        y.into_data(),
        x.grad(&grads).unwrap().into_data(),
        params[0].val().grad(&grads).unwrap().into_data(),
        params[1].val().grad(&grads).unwrap().into_data(),
        running[0].value_sync().into_data(),
        running[1].value_sync().into_data(),
    ]
}

fn assert_close(ember: &Step, burn: &Step) {
    let names = [
        "output",
        "input grad",
        "gamma grad",
        "beta grad",
        "running mean",
        "running var",
    ];
    common::assert_close(&names, ember, burn);
}

#[test]
fn a_training_step_matches_burns_layer_on_images() {
    // Rows of 100 (not a multiple of the 16 lanes) and a large batch.
    let x = input([24, 5, 10, 10], 1);
    let ember = ember_step(&x, 5);
    let burn = burn_step(&x, 5);
    assert_close(&ember, &burn);
    // Close, yet rounded otherwise: the fused kernel ran, not burn's ops.
    assert_ne!(ember[1], burn[1], "the input's gradient is bitwise burn's");
}

#[test]
fn a_training_step_matches_burns_layer_on_vectors() {
    // BatchNorm over [batch, channels]: rows of one value.
    let x = input([64, 7], 2);
    let ember = ember_step(&x, 7);
    let burn = burn_step(&x, 7);
    assert_close(&ember, &burn);
}

#[test]
fn the_step_is_bitwise_the_same_on_one_thread_and_on_four() {
    let x = input([32, 3, 40, 40], 3);
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| ember_step(&x, 3))
    };
    assert_eq!(on(1), on(4));
}

#[test]
fn inference_uses_the_running_statistics_and_the_record_is_burns() {
    let x = input([16, 4, 6, 6], 4);
    CpuAccelerator::install_kernels();
    let ember = BatchNormConfig::new(4).init::<B>(&FlexDevice);
    let burn = burn::nn::BatchNormConfig::new(4).init::<B>(&FlexDevice);
    for _ in 0..3 {
        ember.forward(x.clone());
        burn.forward(x.clone());
    }
    // burn's layer loads ember's record by its field names: same fields, same values.
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let bytes = Recorder::<B>::record(&recorder, ember.clone().into_record(), ()).unwrap();
    let record = Recorder::<B>::load(&recorder, bytes, &FlexDevice).unwrap();
    let loaded = burn::nn::BatchNormConfig::new(4)
        .init::<B>(&FlexDevice)
        .load_record(record);
    let (ember, burn, loaded) = (ember.valid(), burn.valid(), loaded.valid());
    let x = x.inner();
    let tolerance = Tolerance::rel_abs(1e-4, 1e-5);
    let expected = burn.forward(x.clone()).into_data();
    ember
        .forward(x.clone())
        .into_data()
        .assert_approx_eq::<f32>(&expected, tolerance);
    loaded
        .forward(x)
        .into_data()
        .assert_approx_eq::<f32>(&expected, tolerance);
}
