//! Adam as ember runs it: burn's Adam, with the update of each parameter done by one fused
//! kernel where the accelerator installed one for its backend.
//!
//! burn's Adam composes a dozen tensor ops per parameter, each a pass over the parameter's
//! size in memory; a fused kernel reads the weights, gradient and moments once and writes the
//! weights and moments once. A kernel computes what burn's composition computes, to the bit;
//! where none is installed, or it declines a tensor (a dtype it lacks), burn's own Adam runs.
//! The state is burn's [`AdamState`], so records and checkpoints are the same either way.

use std::sync::Arc;

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamState, AdaptiveMomentumState, LearningRate, SimpleOptimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor};

use crate::nn::kernels::{install, installed};

/// The configuration of [`Adam`](super::Adam): burn's `AdamConfig`, field for field (the same
/// defaults, builder methods and file format).
#[derive(Config, Debug)]
pub struct AdamConfig {
    /// The first moment's decay.
    #[config(default = 0.9)]
    pub beta_1: f32,
    /// The second moment's decay.
    #[config(default = 0.999)]
    pub beta_2: f32,
    /// Added to the second moment's root.
    #[config(default = 1e-5)]
    pub epsilon: f32,
    /// AMSGrad: divide by the largest second moment seen (burn's Adam runs it; no kernel does).
    #[config(default = false)]
    pub amsgrad: bool,
    /// An L2 penalty added to the gradient.
    pub weight_decay: Option<WeightDecayConfig>,
    /// Gradient clipping before the step.
    pub grad_clipping: Option<GradientClippingConfig>,
}

impl AdamConfig {
    /// Adam for module `M` on backend `B`.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> super::Adam<M, B> {
        let optim = OptimizerAdaptor::from(AdamRule {
            config: self.clone(),
        });
        match &self.grad_clipping {
            Some(clipping) => optim.with_grad_clipping(clipping.init()),
            None => optim,
        }
    }

    /// The same configuration as burn's.
    fn to_burn(&self) -> burn::optim::AdamConfig {
        burn::optim::AdamConfig::new()
            .with_beta_1(self.beta_1)
            .with_beta_2(self.beta_2)
            .with_epsilon(self.epsilon)
            .with_amsgrad(self.amsgrad)
            .with_weight_decay(self.weight_decay.clone())
    }
}

/// Adam's update of one parameter ([`SimpleOptimizer`]): an installed kernel's, else burn's.
#[derive(Clone)]
pub struct AdamRule {
    config: AdamConfig,
}

/// The numbers one step of Adam uses, as burn computes them (in f32).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// The first moment's decay, β₁.
    pub beta_1: f32,
    /// The second moment's decay, β₂.
    pub beta_2: f32,
    /// `1 − β₁` and `1 − β₂`.
    pub factors: (f32, f32),
    /// `√(1 − β₂ᵗ) / (1 − β₁ᵗ)`: what the first moment is multiplied by.
    pub combined: f32,
    /// `ε · √(1 − β₂ᵗ)`: what is added to the second moment's root.
    pub epsilon: f32,
    /// The learning rate, in f32.
    pub lr: f32,
    /// The L2 penalty added to the gradient (`w · penalty + g`), if any.
    pub penalty: Option<f32>,
}

impl AdamStep {
    /// Step `time` (1 for the first) of `config` at learning rate `lr`.
    pub fn new(config: &AdamConfig, time: usize, lr: LearningRate) -> Self {
        let time = time as i32;
        let correction = (1.0 - config.beta_2.powi(time)).sqrt();
        Self {
            beta_1: config.beta_1,
            beta_2: config.beta_2,
            factors: (1.0 - config.beta_1, 1.0 - config.beta_2),
            combined: correction / (1.0 - config.beta_1.powi(time)),
            epsilon: config.epsilon * correction,
            lr: lr as f32,
            penalty: config.weight_decay.as_ref().map(|d| d.penalty),
        }
    }
}

/// Adam's update of one parameter in one operation, on backend `B`. Tensors are flat; the
/// moments are `None` at the first step.
pub trait AdamKernel<B: Backend>: Send + Sync + 'static {
    /// Whether the kernel updates parameters of type `dtype`.
    fn takes(&self, dtype: DType) -> bool;

    /// The weights and both moments after `step`, given the weights, their gradient and the
    /// moments before. Every value is what burn's Adam computes, to the bit.
    fn step(
        &self,
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        moments: Option<(Tensor<B, 1>, Tensor<B, 1>)>,
        step: AdamStep,
    ) -> (Tensor<B, 1>, Tensor<B, 1>, Tensor<B, 1>);
}

/// Makes `kernel` the Adam kernel of backend `B` in this process (replacing one installed
/// before). `B` is the backend optimizers step on: an autodiff backend's inner one.
pub fn install_adam<B: Backend>(kernel: impl AdamKernel<B>) {
    install::<dyn AdamKernel<B>>(Arc::new(kernel));
}

impl<B: Backend> SimpleOptimizer<B> for AdamRule {
    type State<const D: usize> = AdamState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let kernel = installed::<dyn AdamKernel<B>>()
            .filter(|k| !self.config.amsgrad && k.takes(tensor.dtype()));
        let Some(kernel) = kernel else {
            return self.config.to_burn().build().step(lr, tensor, grad, state);
        };
        let dims = tensor.dims();
        let flat = |t: Tensor<B, D>| t.reshape([dims.iter().product::<usize>()]);
        let time = state.as_ref().map_or(1, |s| s.momentum.time + 1);
        let moments = state.map(|s| (flat(s.momentum.moment_1), flat(s.momentum.moment_2)));
        let step = AdamStep::new(&self.config, time, lr);
        let (param, m1, m2) = kernel.step(flat(tensor), flat(grad), moments, step);
        let back = |t: Tensor<B, 1>| t.reshape(dims);
        let momentum = AdaptiveMomentumState::new(time, back(m1), back(m2));
        (back(param), Some(AdamState::new(momentum)))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        <burn::optim::Adam as SimpleOptimizer<B>>::to_device(state, device)
    }
}
