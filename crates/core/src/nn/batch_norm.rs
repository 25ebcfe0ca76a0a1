//! Batch normalization: burn's layer, fused where an accelerator installed a kernel.

use burn::config::Config;
use burn::module::{Initializer, Module, Param, RunningState};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use super::kernels::BatchNormStats;

/// Configuration of a [`BatchNorm`] layer (burn's `BatchNormConfig`'s fields and defaults).
#[derive(Config, Debug)]
pub struct BatchNormConfig {
    /// Channels: the size of dimension 1 of the input.
    pub num_features: usize,
    /// Added to the variance before its square root.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Weight of a batch's statistics in the running ones.
    #[config(default = 0.1)]
    pub momentum: f64,
}

/// Batch normalization over every dimension of an input `[batch, channels, ...]` but the
/// channels, as burn's `BatchNorm`: in training, each channel is normalized by the batch's mean
/// and (biased) variance, which also update the running statistics
/// (`running = (1 − momentum)·running + momentum·batch`); in inference, by the running ones;
/// then scaled by `gamma` and shifted by `beta`.
///
/// A drop-in replacement for burn's layer (the record's fields are the same, so checkpoints of
/// either load in the other), faster in training where the accelerator has fused kernels:
/// on `cpu` the forward pass is two passes over the activations and the backward pass two,
/// where burn's composition makes about ten and twenty.
#[derive(Module, Debug)]
pub struct BatchNorm<B: Backend> {
    /// The per-channel scale.
    pub gamma: Param<Tensor<B, 1>>,
    /// The per-channel shift.
    pub beta: Param<Tensor<B, 1>>,
    /// The running mean of the batches' means.
    pub running_mean: RunningState<Tensor<B, 1>>,
    /// The running mean of the batches' variances.
    pub running_var: RunningState<Tensor<B, 1>>,
    /// Weight of a batch's statistics in the running ones.
    pub momentum: f64,
    /// Added to the variance before its square root.
    pub epsilon: f64,
}

impl BatchNormConfig {
    /// A layer with `gamma` 1, `beta` 0, running mean 0 and running variance 1.
    pub fn init<B: Backend>(&self, device: &B::Device) -> BatchNorm<B> {
        let channels = [self.num_features];
        BatchNorm {
            gamma: Initializer::Ones.init(channels, device),
            beta: Initializer::Zeros.init(channels, device),
            running_mean: RunningState::new(Tensor::zeros(channels, device)),
            running_var: RunningState::new(Tensor::ones(channels, device)),
            momentum: self.momentum,
            epsilon: self.epsilon,
        }
    }
}

impl<B: Backend> BatchNorm<B> {
    /// Normalizes `input` (`[batch, channels, ...]`, at least 2 dimensions): with the batch's
    /// statistics when the backend records gradients (training), else with the running ones.
    ///
    /// # Panics
    /// When `input` has fewer than 2 dimensions, as burn's layer does.
    pub fn forward<const D: usize>(&self, input: Tensor<B, D>) -> Tensor<B, D> {
        assert!(
            D >= 2,
            "BatchNorm takes inputs [batch, channels, ...] of 2 dimensions or more, not {D}"
        );
        if !B::ad_enabled(&input.device()) {
            return self.burn_layer().forward(input);
        }
        let Some(kernel) = super::kernels::batch_norm::<B>() else {
            return self.burn_layer().forward(input);
        };
        let dims = input.dims();
        let rows: usize = dims[2..].iter().product();
        let flat = input.clone().reshape([dims[0], dims[1], rows]);
        let gamma = self.gamma.val();
        let beta = self.beta.val();
        match kernel.train(flat, gamma, beta, self.epsilon) {
            Some(BatchNormStats { output, mean, var }) => {
                self.update_running(mean, var);
                output.reshape(dims)
            }
            None => self.burn_layer().forward(input),
        }
    }

    /// Folds a batch's statistics into the running ones, as burn's layer does.
    fn update_running(&self, mean: Tensor<B, 1>, var: Tensor<B, 1>) {
        let blend = |running: &RunningState<Tensor<B, 1>>, batch: Tensor<B, 1>| {
            let device = batch.device();
            let old = running.value_sync().to_device(&device);
            let new = old
                .mul_scalar(1.0 - self.momentum)
                .add(batch.detach().mul_scalar(self.momentum));
            running.update(new.detach());
        };
        blend(&self.running_mean, mean);
        blend(&self.running_var, var);
    }

    /// burn's layer over the same parameters and running statistics (a running state's clone
    /// shares its value).
    fn burn_layer(&self) -> burn::nn::BatchNorm<B> {
        let shared = |param: &Param<Tensor<B, 1>>| Param::initialized(param.id, param.val());
        burn::nn::BatchNorm {
            gamma: shared(&self.gamma),
            beta: shared(&self.beta),
            running_mean: self.running_mean.clone(),
            running_var: self.running_var.clone(),
            momentum: self.momentum,
            epsilon: self.epsilon,
        }
    }
}
