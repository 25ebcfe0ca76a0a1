//! Dynamic loss scaling for 16-mixed (the policy of torch's `GradScaler`).
//!
//! f16 gradients underflow to zero when small; scaling the loss by a large factor keeps them
//! representable. The Trainer multiplies the (f32) loss by `scale` before backward, divides the
//! gradients by it afterwards, and checks them: if any is NaN or infinite the optimizer step
//! is skipped and the scale halves; after `growth_interval` good steps in a row it doubles.
//! Clipping runs after unscaling, on true gradient values.

use serde::{Deserialize, Serialize};

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;

use crate::plugins::access::{Gradients, ModelGradients};

/// The checkpoint section the loss scaler's state is saved under.
pub const STATE_KEY: &str = "grad_scaler";

/// The loss scale and its schedule; saved in checkpoints so a resumed run keeps its scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradScaler {
    /// The factor the loss is multiplied by.
    pub scale: f64,
    /// Multiplies the scale after `growth_interval` good steps.
    pub growth_factor: f64,
    /// Multiplies the scale after a step with non-finite gradients.
    pub backoff_factor: f64,
    /// Good steps in a row before the scale grows.
    pub growth_interval: u64,
    /// Good steps since the last change of scale.
    pub good_steps: u64,
    /// Optimizer steps skipped so far.
    pub skipped_steps: u64,
}

impl Default for GradScaler {
    /// torch's defaults: scale 2^16, ×2 after 2000 good steps, ×0.5 after an overflow.
    fn default() -> Self {
        Self {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            good_steps: 0,
            skipped_steps: 0,
        }
    }
}

impl GradScaler {
    /// Records whether this step's gradients were all finite and adjusts the scale; returns
    /// whether the optimizer should step.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.good_steps += 1;
            if self.good_steps >= self.growth_interval {
                self.scale *= self.growth_factor;
                self.good_steps = 0;
            }
        } else {
            self.scale *= self.backoff_factor;
            self.good_steps = 0;
            self.skipped_steps += 1;
        }
        finite
    }

    /// Divides the gradients by the scale and says whether they are all finite (one host
    /// read per step, as torch's `found_inf` check).
    pub fn unscale_gradients(&self, grads: &mut dyn Gradients) -> bool {
        grads.scale(1.0 / self.scale);
        grads.all_finite()
    }

    /// [`unscale_gradients`](Self::unscale_gradients) on `model`'s gradients in burn's container.
    pub fn unscale<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        model: &M,
        grads: &mut GradientsParams,
    ) -> bool {
        self.unscale_gradients(&mut ModelGradients::<B, M>::new(model, grads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_halves_and_good_steps_grow() {
        let mut s = GradScaler {
            growth_interval: 3,
            ..GradScaler::default()
        };
        assert!(!s.update(false));
        assert_eq!((s.scale, s.skipped_steps), (32768.0, 1));
        assert!(s.update(true) && s.update(true));
        assert_eq!(s.scale, 32768.0);
        assert!(s.update(true));
        assert_eq!((s.scale, s.good_steps), (65536.0, 0));
        assert!(s.update(true));
        assert!(!s.update(false));
        assert_eq!((s.scale, s.good_steps, s.skipped_steps), (32768.0, 0, 2));
    }

    /// 16-mixed's check: huge finite gradients step, NaN or ±Inf skip.
    #[test]
    fn huge_finite_gradients_are_not_skipped() {
        use burn::nn::{Linear, LinearConfig};
        use burn::tensor::Tensor;
        type B = burn_autodiff::Autodiff<burn_flex::Flex>;
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(2, 1).with_bias(false).init(&device);
        let scaler = GradScaler::default();
        let unscaled = |value: f32| {
            let mut grads = GradientsParams::new();
            let g = Tensor::<burn_flex::Flex, 2>::from_data([[value], [1.0]], &device);
            grads.register(model.weight.id, g * scaler.scale);
            scaler.unscale(&model, &mut grads)
        };
        assert!(unscaled(1e20));
        assert!(unscaled(1.0));
        assert!(!unscaled(f32::NAN));
        assert!(!unscaled(f32::INFINITY));
    }
}
