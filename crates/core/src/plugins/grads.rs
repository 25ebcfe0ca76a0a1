//! Gradient clipping over a whole model, as Lightning does it.
//!
//! burn's own `GradientClipping` clips each parameter's gradient on its own; Lightning's
//! `gradient_clip_algorithm="norm"` bounds the global L2 norm of all gradients together. The
//! clip coefficient stays on the device (`min(1, max_norm / (norm + 1e-6))`), so clipping costs
//! no host synchronisation, and multiplying by exactly 1.0 leaves unclipped gradients bitwise
//! unchanged.

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, ElementConversion, Tensor};

use crate::options::ClipAlgorithm;

/// Each float gradient's sum of squares, in visit order.
struct Squares<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    squares: Vec<(ParamId, Tensor<B::InnerBackend, 1>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Squares<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            self.squares.push((param.id, g.square().sum()));
        }
    }
}

/// Whether every float gradient holds only finite values, as one boolean on the device.
struct Finite<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    all: Option<Tensor<B::InnerBackend, 1, Bool>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Finite<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            // |g| < inf is false exactly for NaN and ±Inf, and squares nothing: no overflow.
            let finite = g.abs().lower_elem(f64::INFINITY).all();
            self.all = Some(match self.all.take() {
                Some(all) => all.bool_and(finite),
                None => finite,
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

/// Each of the model's gradients' sum of squares (one element each), in visit order: the
/// parts [`norm_of_squares`] makes the global norm of.
pub fn squares<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> Vec<(ParamId, Tensor<B::InnerBackend, 1>)> {
    let mut visitor = Squares::<B> {
        grads,
        squares: Vec::new(),
    };
    model.visit(&mut visitor);
    visitor.squares
}

/// The L2 norm of gradients whose sums of squares are `squares`, added up in their order
/// (`None` when there are none). A sharded strategy gathers every rank's parts and calls
/// this with them all in visit order: the sum, and so the norm, is then bitwise the one
/// process's.
pub fn norm_of_squares<B: Backend>(
    squares: impl IntoIterator<Item = Tensor<B, 1>>,
) -> Option<Tensor<B, 1>> {
    squares
        .into_iter()
        .reduce(|total, square| total + square)
        .map(Tensor::sqrt)
}

/// The global L2 norm of the model's gradients, on the device (`None` when it has none).
pub fn global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    norm_of_squares(squares::<B, M>(model, grads).into_iter().map(|(_, s)| s))
}

/// Whether every gradient of the model is finite (no NaN, no ±Inf; true when there are none),
/// checked element by element on the device with one host read. Unlike the global norm, whose
/// sum of squares overflows for finite values above ~1.8e19 in f32, it never reports huge
/// finite gradients as non-finite (torch's GradScaler checks each element the same way).
pub fn all_finite<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &GradientsParams,
) -> bool {
    let mut visitor = Finite::<B> { grads, all: None };
    model.visit(&mut visitor);
    visitor
        .all
        .is_none_or(|all| all.int().into_scalar().elem::<i64>() == 1)
}

/// Scales the gradients so that their global norm, `norm`, becomes at most `max_norm`
/// (`min(1, max_norm / (norm + 1e-6))`, on the device).
pub fn clip_to_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    norm: Tensor<B::InnerBackend, 1>,
    max_norm: f64,
) {
    let coef = (norm.add_scalar(1e-6).recip() * max_norm).clamp_max(1.0);
    map_grads(model, grads, ScaleBy::<B>(coef));
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
                clip_to_norm::<B, M>(model, grads, norm, threshold);
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

    /// Gradients for a 4->1 linear layer: `weight` everywhere, 1.0 for the bias.
    fn grads_of(model: &Linear<B>, weight: f32) -> GradientsParams {
        let device = Default::default();
        let mut grads = GradientsParams::new();
        let w =
            Tensor::<burn_flex::Flex, 2>::from_data([[1.0f32], [weight], [1.0], [-1.0]], &device);
        grads.register(model.weight.id, w);
        let bias = model.bias.as_ref().expect("a bias");
        grads.register(bias.id, Tensor::<burn_flex::Flex, 1>::ones([1], &device));
        grads
    }

    #[test]
    fn finiteness_is_checked_per_element_without_overflow() {
        let model: Linear<B> = LinearConfig::new(4, 1).init(&Default::default());
        let huge = grads_of(&model, 1e20);
        // The f32 sum of squares overflows although every gradient is finite ...
        let norm = global_norm::<B, _>(&model, &huge).unwrap().into_scalar();
        assert!(norm.is_infinite(), "{norm}");
        // ... the element check does not.
        assert!(all_finite::<B, _>(&model, &huge));
        assert!(all_finite::<B, _>(&model, &grads_of(&model, -3.4e38)));
        assert!(all_finite::<B, _>(&model, &grads_of(&model, 0.5)));
        assert!(all_finite::<B, _>(&model, &GradientsParams::new()));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert!(!all_finite::<B, _>(&model, &grads_of(&model, bad)), "{bad}");
        }
    }
}
