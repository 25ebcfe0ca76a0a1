//! Buffers lent in place: a classifier's training step with Adam writes each weight, bias and moment whose
//! every read comes before its update over the tensor it updates, and XLA compiles the step
//! with no copy (a buffer lent to the wrong output, or by a weight the backward pass still
//! reads for the layer below, makes XLA copy it aside). The trained values are eager
//! burn-flex's. Its own test binary, so that the process's programs are this loop's alone.

use burn::module::{Module, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_flex::Flex;
use ember_accel_tpu_xla::backend::{mark_step, runtime::runtime};
use ember_accel_tpu_xla::{Xla, XlaDevice};

mod common;
use common::values;

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    first: Linear<B>,
    second: Linear<B>,
}

impl<B: Backend> Mlp<B> {
    /// A 6-8-3 MLP with the same weights on every backend.
    fn new(device: &B::Device) -> Self {
        let linear = |inputs: usize, outputs: usize, seed: u64| {
            let weight = TensorData::new(values(inputs * outputs, seed), [inputs, outputs]);
            let bias = TensorData::new(values(outputs, seed + 1), [outputs]);
            Linear {
                weight: Param::from_tensor(Tensor::from_data(weight, device)),
                bias: Some(Param::from_tensor(Tensor::from_data(bias, device))),
            }
        };
        Mlp {
            first: linear(6, 8, 10),
            second: linear(8, 3, 20),
        }
    }

    /// The cross-entropy of classifying `x` as `y`.
    fn loss(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let h = Relu::new().forward(self.first.forward(x));
        let logits = self.second.forward(h);
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, y)
    }
}

/// `steps` Adam steps on `x`; the first weight after them.
fn train<B: AutodiffBackend>(
    x: &TensorData,
    steps: usize,
    device: &B::Device,
    end_step: impl Fn(),
) -> TensorData {
    let mut model = Mlp::<B>::new(device);
    let mut optim = AdamConfig::new().init();
    for _ in 0..steps {
        let y = Tensor::from_data(TensorData::new(vec![0i64, 2, 1, 2], [4]), device);
        let loss = model.loss(Tensor::from_data(x.clone(), device), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
        end_step();
    }
    model.first.weight.val().into_data()
}

/// The tensors a steady step writes in place: every moment, the first layer's weight and both
/// biases; not the second layer's weight, which the backward pass reads for the gradient of
/// the first layer's output, after nothing its own update needs.
const LENT: usize = 4 * 2 + 3;

fn mentions(hlo: &[u8], what: &str) -> bool {
    hlo.windows(what.len()).any(|w| w == what.as_bytes())
}

#[test]
fn an_adam_step_updates_its_tensors_in_place_without_copies() {
    if !common::plugin_found() {
        return;
    }
    let flex = Default::default();
    let x = TensorData::new(values(4 * 6, 3), [4, 6]);
    let dev = XlaDevice::new(0);
    let got = train::<Autodiff<Xla>>(&x, 4, &dev, || mark_step(&dev));
    let want = train::<Autodiff<Flex>>(&x, 4, &flex, || ());
    got.assert_approx_eq::<f32>(&want, burn::tensor::Tolerance::rel_abs(1e-4, 1e-5));

    let programs = runtime().expect("the plugin loads").programs();
    let steady: Vec<_> = (programs.iter())
        .filter(|(text, _)| text.matches("tf.aliasing_output").count() == LENT)
        .collect();
    assert!(
        !steady.is_empty(),
        "no step lent {LENT} buffers:\n{}",
        (programs.iter().map(|(t, _)| t.lines().next().unwrap_or("")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    for (text, exe) in steady {
        let optimized = exe.optimized_program().expect("the optimized program");
        assert!(
            !mentions(&optimized, "copy"),
            "XLA copies buffers in the step {}",
            text.lines().next().unwrap_or("")
        );
    }
}
