//! Gradient clipping over a whole model, as Lightning does it.
//!
//! burn's own `GradientClipping` clips each parameter's gradient on its own; Lightning's
//! `gradient_clip_algorithm="norm"` bounds the global L2 norm of all gradients together. The
//! clip coefficient stays on the device (`min(1, max_norm / (norm + 1e-6))`), so clipping costs
//! no host synchronisation, and multiplying by exactly 1.0 leaves unclipped gradients bitwise
//! unchanged.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;

use crate::options::ClipAlgorithm;

/// Sum of squares of every float gradient the model has.
struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    total: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            let sq = g.square().sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + sq,
                None => sq,
            });
        }
    }
}

/// Applies `f` to every float gradient of the model.
struct MapGrads<'a, B: AutodiffBackend, F> {
    grads: &'a mut GradientsParams,
    f: F,
    _backend: std::marker::PhantomData<B>,
}

/// A gradient transformation that works for every tensor rank.
trait GradFn<B: AutodiffBackend> {
    fn apply<const D: usize>(&self, g: Tensor<B::InnerBackend, D>) -> Tensor<B::InnerBackend, D>;
}

impl<B: AutodiffBackend, F: GradFn<B>> ModuleVisitor<B> for MapGrads<'_, B, F> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            self.grads.register(param.id, self.f.apply(g));
        }
    }
}

struct ScaleBy<B: AutodiffBackend>(Tensor<B::InnerBackend, 1>);

impl<B: AutodiffBackend> GradFn<B> for ScaleBy<B> {
    fn apply<const D: usize>(&self, g: Tensor<B::InnerBackend, D>) -> Tensor<B::InnerBackend, D> {
        g * self.0.clone().reshape([1; D])
    }
}

struct MulBy(f64);

impl<B: AutodiffBackend> GradFn<B> for MulBy {
    fn apply<const D: usize>(&self, g: Tensor<B::InnerBackend, D>) -> Tensor<B::InnerBackend, D> {
        g.mul_scalar(self.0)
    }
}

struct ClampTo(f64);

impl<B: AutodiffBackend> GradFn<B> for ClampTo {
    fn apply<const D: usize>(&self, g: Tensor<B::InnerBackend, D>) -> Tensor<B::InnerBackend, D> {
        g.clamp(-self.0, self.0)
    }
}

fn map_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    f: impl GradFn<B>,
) {
    model.visit(&mut MapGrads {
        grads,
        f,
        _backend: std::marker::PhantomData,
    });
}

/// The global L2 norm of the model's gradients, on the device (`None` when it has none).
pub fn global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut visitor = SquaredNorm::<B> { grads, total: None };
    model.visit(&mut visitor);
    visitor.total.map(Tensor::sqrt)
}

/// Multiplies every gradient by `factor` (unscaling after loss scaling).
pub fn scale<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    factor: f64,
) {
    map_grads(model, grads, MulBy(factor));
}

/// Clips the gradients in place: by global norm or by value.
pub fn clip<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    algorithm: ClipAlgorithm,
    threshold: f64,
) {
    match algorithm {
        ClipAlgorithm::Value => map_grads(model, grads, ClampTo(threshold)),
        ClipAlgorithm::Norm => {
            if let Some(norm) = global_norm::<B, M>(model, grads) {
                let coef = (norm.add_scalar(1e-6).recip() * threshold).clamp_max(1.0);
                map_grads(model, grads, ScaleBy::<B>(coef));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};

    type B = burn_autodiff::Autodiff<burn_flex::Flex>;

    #[test]
    fn clipping_bounds_the_global_norm_and_each_value() {
        let device = Default::default();
        let model: Linear<B> = LinearConfig::new(4, 1).init(&device);
        let x = Tensor::<B, 2>::from_data([[1.0, -2.0, 3.0, 0.5], [0.3, 0.2, -1.0, 2.0]], &device);
        let fresh = || {
            let loss = model.forward(x.clone()).square().sum() * 1000.0;
            GradientsParams::from_grads(loss.backward(), &model)
        };
        let norm = |g: &GradientsParams| global_norm::<B, _>(&model, g).unwrap().into_scalar();
        let grads = fresh();
        assert!(norm(&grads) > 1.0);
        let mut by_norm = fresh();
        clip(&model, &mut by_norm, ClipAlgorithm::Norm, 0.5);
        assert!((norm(&by_norm) - 0.5).abs() < 1e-4, "{}", norm(&by_norm));
        let mut by_value = fresh();
        clip(&model, &mut by_value, ClipAlgorithm::Value, 0.01);
        let w = by_value
            .get::<burn_flex::Flex, 2>(model.weight.id)
            .unwrap()
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert!(w.iter().all(|g| g.abs() <= 0.01 + 1e-7), "{w:?}");
        let mut small = fresh();
        clip(&model, &mut small, ClipAlgorithm::Norm, 1e9);
        assert_eq!(norm(&small), norm(&grads), "an unclipped norm changed");
    }
}
