//! The digits model: an MLP with ReLU activations.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::data::{CLASSES, PIXELS};

/// The `model` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Widths of the hidden layers.
    pub hidden: Vec<usize>,
    /// Adam learning rate.
    pub lr: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            hidden: vec![256, 256],
            lr: 1e-3,
        }
    }
}

impl ModelConfig {
    /// A freshly initialised MLP `64 → hidden… → 10`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let mut width = PIXELS;
        let mut hidden = Vec::with_capacity(self.hidden.len());
        for &h in &self.hidden {
            hidden.push(LinearConfig::new(width, h).init(device));
            width = h;
        }
        Mlp {
            hidden,
            output: LinearConfig::new(width, CLASSES).init(device),
            activation: Relu::new(),
        }
    }
}

/// A multi-layer perceptron over flattened 8×8 images.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden: Vec<Linear<B>>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Mlp<B> {
    /// Logits for a batch `[n, 64]` → `[n, 10]`.
    pub fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        for layer in &self.hidden {
            x = self.activation.forward(layer.forward(x));
        }
        self.output.forward(x)
    }
}
