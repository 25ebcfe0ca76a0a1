//! ember's `LayerNorm` on the CPU accelerator's fused kernel against burn's `LayerNorm`: the
//! same outputs and gradients up to float rounding, with and without a shift, whatever the
//! number of threads (bitwise), and the same record.

mod common;

use burn::module::{AutodiffModule, Module, Param};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::{Tensor, TensorData, Tolerance};
use burn_flex::FlexDevice;
use common::{B, input, weighted_sum};
use ember_accel_cpu::CpuAccelerator;
use ember_core::Accelerator;
use ember_core::nn::LayerNormConfig;

/// What one training step leaves: the output and the gradients of the input, gamma and (when
/// the layer has one) beta.
type Step = Vec<TensorData>;

fn ember_step<const D: usize>(x: &Tensor<B, D>, features: usize, bias: bool) -> Step {
    CpuAccelerator::install_kernels();
    let norm = LayerNormConfig::new(features)
        .with_bias(bias)
        .init::<B>(&FlexDevice);
    step(x, &norm.gamma, norm.beta.as_ref(), |x| norm.forward(x))
}

fn burn_step<const D: usize>(x: &Tensor<B, D>, features: usize, bias: bool) -> Step {
    let norm = burn::nn::LayerNormConfig::new(features)
        .with_bias(bias)
        .init::<B>(&FlexDevice);
    step(x, &norm.gamma, norm.beta.as_ref(), |x| norm.forward(x))
}

/// A layer's training step on `x` by `forward`.
fn step<const D: usize>(
    x: &Tensor<B, D>,
    gamma: &Param<Tensor<B, 1>>,
    beta: Option<&Param<Tensor<B, 1>>>,
    forward: impl FnOnce(Tensor<B, D>) -> Tensor<B, D>,
) -> Step {
    let x = x.clone().require_grad();
    let y = forward(x.clone());
    let grads = weighted_sum(y.clone()).backward();
    let mut step = vec![
        y.into_data(),
        x.grad(&grads).unwrap().into_data(),
        gamma.val().grad(&grads).unwrap().into_data(),
    ];
    step.extend(beta.map(|b| b.val().grad(&grads).unwrap().into_data()));
    step
}

fn assert_close(ember: &Step, burn: &Step) {
    let names = ["output", "input grad", "gamma grad", "beta grad"];
    common::assert_close(&names, ember, burn);
}

#[test]
fn a_training_step_matches_burns_layer() {
    // 3 × 35 rows (not a multiple of the kernel's blocks) of 37 features (nor of its lanes).
    let x = input([3, 35, 37], 11);
    let (ember, burn) = (ember_step(&x, 37, true), burn_step(&x, 37, true));
    assert_close(&ember, &burn);
    // Close, yet rounded otherwise: the fused kernel ran, not burn's ops.
    assert_ne!(ember[1], burn[1], "the input's gradient is bitwise burn's");
}

#[test]
fn a_training_step_without_a_shift_matches_burns_layer() {
    let x = input([64, 48], 12);
    let (ember, burn) = (ember_step(&x, 48, false), burn_step(&x, 48, false));
    assert_eq!(ember.len(), 3, "no beta, no beta gradient");
    assert_close(&ember, &burn);
}

#[test]
fn the_step_is_bitwise_the_same_on_one_thread_and_on_four() {
    let x = input([8, 100, 64], 13);
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| ember_step(&x, 64, true))
    };
    assert_eq!(on(1), on(4));
}

#[test]
fn inference_matches_burns_layer_and_the_record_is_burns() {
    let x = input([10, 16], 14);
    CpuAccelerator::install_kernels();
    let ember = LayerNormConfig::new(16).init::<B>(&FlexDevice);
    // burn's layer loads ember's record by its field names.
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let bytes = Recorder::<B>::record(&recorder, ember.clone().into_record(), ()).unwrap();
    let record = Recorder::<B>::load(&recorder, bytes, &FlexDevice).unwrap();
    let burn = burn::nn::LayerNormConfig::new(16)
        .init::<B>(&FlexDevice)
        .load_record(record);
    let x = x.inner();
    let expected = burn.valid().forward(x.clone()).into_data();
    (ember.valid().forward(x).into_data())
        .assert_approx_eq::<f32>(&expected, Tolerance::rel_abs(1e-5, 1e-6));
}
