//! Layer normalization: burn's layer, fused where an accelerator installed a kernel.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};

/// Configuration of a [`LayerNorm`] layer (burn's `LayerNormConfig`'s fields and defaults).
#[derive(Config, Debug)]
pub struct LayerNormConfig {
    /// Features: the size of the input's last dimension.
    pub d_model: usize,
    /// Added to the variance before its square root.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Whether the layer has a shift (`beta`).
    #[config(default = true)]
    pub bias: bool,
}

/// Layer normalization over the last dimension, as burn's `LayerNorm`: each row normalized by
/// its own mean and (biased) variance, then scaled by `gamma` and shifted by `beta`.
///
/// A drop-in replacement for burn's layer (the record's fields are the same), faster in training
/// where the accelerator has a fused kernel: on `cpu` the backward pass is two passes over the
/// activations, where burn's composition under autodiff makes about twenty.
#[derive(Module, Debug)]
pub struct LayerNorm<B: Backend> {
    /// The per-feature scale.
    pub gamma: Param<Tensor<B, 1>>,
    /// The per-feature shift, if the layer has one.
    pub beta: Option<Param<Tensor<B, 1>>>,
    epsilon: f64,
}

impl LayerNormConfig {
    /// A layer with `gamma` 1 and `beta` 0.
    pub fn init<B: Backend>(&self, device: &B::Device) -> LayerNorm<B> {
        let features = [self.d_model];
        LayerNorm {
            gamma: Initializer::Ones.init(features, device),
            beta: (self.bias).then(|| Initializer::Zeros.init(features, device)),
            epsilon: self.epsilon,
        }
    }
}

impl<B: Backend> LayerNorm<B> {
    /// Normalizes each row of `input` (`[..., features]`).
    pub fn forward<const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        let gamma = self.gamma.val();
        let beta = self.beta.as_ref().map(Param::val);
        // Training only: inference runs burn's op, which backends fuse themselves.
        let kernel = B::ad_enabled(&input.device())
            .then(super::kernels::layer_norm::<B>)
            .flatten();
        if let Some(kernel) = kernel {
            let dims = input.dims();
            let features = dims[D - 1];
            let rows = dims[..D - 1].iter().product();
            let flat = input.clone().reshape([rows, features]);
            if let Some(output) = kernel.train(flat, gamma.clone(), beta.clone(), self.epsilon) {
                return output.reshape(dims);
            }
        }
        let primitive = |t: Tensor<B, 1>| t.into_primitive().tensor();
        Tensor::from_primitive(TensorPrimitive::Float(B::layer_norm(
            input.into_primitive().tensor(),
            primitive(gamma),
            beta.map(primitive),
            self.epsilon,
        )))
    }
}
