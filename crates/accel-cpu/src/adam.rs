//! Adam's update of one f32 parameter in one pass over burn-flex's buffers: the weights, the
//! gradient and both moments are read once and the weights and moments written once, in place
//! where the buffers are the kernel's own, instead of burn's dozen tensor ops (each a pass).
//! Every value is computed with the f32 operations burn's Adam runs on burn-flex, in the same
//! order, so the results are bitwise the same.

use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_flex::{Flex, FlexTensor};
use ember_core::optim::adam::{AdamKernel, AdamStep};
use rayon::prelude::*;

/// Values one task updates: large enough that a task outweighs its scheduling.
const CHUNK: usize = 1 << 15;

/// burn-flex's Adam kernel (f32).
pub(crate) struct CpuAdam;

impl AdamKernel<Flex> for CpuAdam {
    fn takes(&self, dtype: DType) -> bool {
        dtype == DType::F32
    }

    fn step(
        &self,
        param: Tensor<Flex, 1>,
        grad: Tensor<Flex, 1>,
        moments: Option<(Tensor<Flex, 1>, Tensor<Flex, 1>)>,
        step: AdamStep,
    ) -> (Tensor<Flex, 1>, Tensor<Flex, 1>, Tensor<Flex, 1>) {
        let first = moments.is_none();
        let mut param = contiguous(param);
        let grad = contiguous(grad);
        let grad = grad.storage::<f32>();
        // burn's first step sets the moments from the gradient alone (`update` with `first`).
        let (mut m1, mut m2) = match moments {
            Some((m1, m2)) => (contiguous(m1), contiguous(m2)),
            None => (zeros(grad.len()), zeros(grad.len())),
        };
        // Written in place: `storage_mut` copies a buffer first only if another tensor shares it.
        let p = param.storage_mut::<f32>();
        let (a, b) = (m1.storage_mut::<f32>(), m2.storage_mut::<f32>());
        (p.par_chunks_mut(CHUNK).zip(a.par_chunks_mut(CHUNK)))
            .zip(b.par_chunks_mut(CHUNK).zip(grad.par_chunks(CHUNK)))
            .for_each(|((p, a), (b, g))| update(p, a, b, g, &step, first));
        (tensor(param), tensor(m1), tensor(m2))
    }
}

/// Updates weights `p` and moments `a`, `b` with gradient `g` as burn's Adam does on
/// burn-flex, operation by operation; `first`: the moments are set, not updated.
fn update(p: &mut [f32], a: &mut [f32], b: &mut [f32], g: &[f32], s: &AdamStep, first: bool) {
    let (f1, f2) = s.factors;
    for (((w, m1), m2), &g) in p.iter_mut().zip(a).zip(b).zip(g) {
        // Weight decay: `tensor.mul_scalar(penalty).add(grad)`.
        let g = s.penalty.map_or(g, |penalty| *w * penalty + g);
        if first {
            *m1 = g * f1;
            *m2 = (g * g) * f2;
        } else {
            *m1 = *m1 * s.beta_1 + g * f1;
            *m2 = *m2 * s.beta_2 + (g * g) * f2;
        }
        let delta = (*m1 * s.combined) / (m2.sqrt() + s.epsilon);
        *w -= delta * s.lr;
    }
}

/// `t`'s buffer holding exactly its values in order: its own when it has one (`t` is dropped,
/// so a buffer no other tensor holds stays unshared), a copy when `t` is a strided view.
fn contiguous(t: Tensor<Flex, 1>) -> FlexTensor {
    t.into_primitive().tensor().to_contiguous()
}

/// `n` zeros.
fn zeros(n: usize) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(vec![0.0f32; n], [n]))
}

fn tensor(t: FlexTensor) -> Tensor<Flex, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use burn::module::AutodiffModule;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::decay::WeightDecayConfig;
    use burn::optim::{AdamState, GradientsParams, Optimizer, SimpleOptimizer};
    use burn::tensor::Distribution;
    use burn::tensor::backend::Backend;
    use burn_autodiff::Autodiff;
    use ember_core::optim::adam::install_adam;
    use ember_core::optim::{AdamConfig, ExactState};

    use super::*;

    type B = Autodiff<Flex>;

    fn bits(t: &Tensor<Flex, 1>) -> Vec<u32> {
        let values = t.clone().into_data().to_vec::<f32>().unwrap();
        values.iter().map(|v| v.to_bits()).collect()
    }

    /// The kernel against burn's Adam on the same weights and gradients, step by step: 60,000
    /// values (several chunks, updated in parallel), with and without weight decay, the first
    /// step (no moments yet) included, at a learning rate that changes every step.
    #[test]
    fn the_kernel_steps_bitwise_as_burns_adam() {
        let device = Default::default();
        Flex::seed(&device, 3);
        for penalty in [None, Some(0.05)] {
            let config = AdamConfig::new().with_weight_decay(penalty.map(WeightDecayConfig::new));
            let burn_adam = burn::optim::AdamConfig::new()
                .with_weight_decay(penalty.map(WeightDecayConfig::new))
                .build();
            let mut theirs = Tensor::<Flex, 1>::random([60_000], Distribution::Default, &device);
            let mut ours = theirs.clone();
            let (mut state, mut moments): (Option<AdamState<Flex, 1>>, _) = (None, None);
            for time in 1..=4 {
                let grad = Tensor::random([60_000], Distribution::Normal(0.0, 1.0), &device);
                let lr = 1e-2 / time as f64;
                let step = AdamStep::new(&config, time, lr);
                let (p, m1, m2) = CpuAdam.step(ours, grad.clone(), moments, step);
                let next = burn_adam.step(lr, theirs, grad, state);
                (theirs, state) = next;
                let m = &state.as_ref().unwrap().momentum;
                assert_eq!(bits(&p), bits(&theirs), "weights, step {time}, {penalty:?}");
                assert_eq!(bits(&m1), bits(&m.moment_1), "first moment, step {time}");
                assert_eq!(bits(&m2), bits(&m.moment_2), "second moment, step {time}");
                (ours, moments) = (p, Some((m1, m2)));
            }
        }
    }

    /// ember's Adam, with the kernel installed, trains a model as burn's Adam does, bitwise,
    /// moments included, each step on the same gradients; the models' first buffers are
    /// shared with a third (the kernel copies those rather than write them).
    #[test]
    fn embers_adam_trains_bitwise_as_burns() {
        install_adam::<Flex>(CpuAdam);
        let device = Default::default();
        B::seed(&device, 7);
        let model = LinearConfig::new(300, 200).init::<B>(&device);
        // burn initialises a parameter when it is first read: read it before the copies.
        model.weight.val();
        let x = Tensor::<B, 2>::random([8, 300], Distribution::Default, &device);
        let mut ember = AdamConfig::new().init::<B, Linear<B>>();
        let mut burn = burn::optim::AdamConfig::new().init::<B, Linear<B>>();
        let (mut fused, mut composed) = (model.clone(), model.clone());
        let (w, b) = (model.weight.id, model.bias.as_ref().unwrap().id);
        for step in 0..4 {
            let loss = fused.forward(x.clone()).powi_scalar(2).mean();
            let grads = GradientsParams::from_grads(loss.backward(), &fused);
            let (gw, gb) = (
                grads.get::<Flex, 2>(w).unwrap(),
                grads.get::<Flex, 1>(b).unwrap(),
            );
            let same = || {
                let mut grads = GradientsParams::new();
                grads.register(w, gw.clone());
                grads.register(b, gb.clone());
                grads
            };
            let lr = 1e-2 / (1.0 + step as f64);
            fused = ember.step(lr, fused, same());
            composed = burn.step(lr, composed, same());
        }
        let (fused, composed) = (fused.valid(), composed.valid());
        let values = |m: &Linear<Flex>| m.weight.val().into_data().to_vec::<f32>().unwrap();
        assert!(values(&fused) == values(&composed), "weights");
        let dtypes: HashMap<_, _> = [(model.weight.id, DType::F32)].into();
        assert_eq!(
            ember.state(&dtypes).unwrap().unwrap(),
            burn.state(&dtypes).unwrap().unwrap(),
            "moments"
        );
    }
}
