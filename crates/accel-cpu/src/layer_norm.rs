//! Layer normalization's training step on burn-flex as fused loops: the backward pass reads the
//! activations and their gradient once for two sums per row and once more for the input's
//! gradient, where burn's composition under autodiff makes about twenty full passes.
//!
//! Rows are handled in blocks of [`BLOCK`] rows, each block on one thread; the per-feature
//! sums for `gamma` and `beta` are added block by block in order, so results do not depend on
//! the number of threads.

use std::mem::MaybeUninit;

use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_flex::{Flex, FlexTensor};
use ember_core::nn::LayerNormKernel;
use rayon::prelude::*;

use crate::fused::{filled, lane_dot, lane_sum, output_gradient, parent_ids, register, values};

/// Rows per block: per-feature partial sums are kept per block.
const BLOCK: usize = 32;

/// The CPU's layer-norm kernel, for `Autodiff<Flex, C>`: f32 inputs only (others go through
/// burn's op).
pub struct CpuLayerNorm;

impl<C: CheckpointStrategy> LayerNormKernel<Autodiff<Flex, C>> for CpuLayerNorm {
    fn train(
        &self,
        x: Tensor<Autodiff<Flex, C>, 2>,
        gamma: Tensor<Autodiff<Flex, C>, 1>,
        beta: Option<Tensor<Autodiff<Flex, C>, 1>>,
        epsilon: f64,
    ) -> Option<Tensor<Autodiff<Flex, C>, 2>> {
        let dtypes = [
            Some(x.dtype()),
            Some(gamma.dtype()),
            beta.as_ref().map(|b| b.dtype()),
        ];
        if dtypes.iter().flatten().any(|&d| d != DType::F32) {
            return None;
        }
        let [rows, features] = x.dims();
        let x = x.into_primitive().tensor();
        let gamma = gamma.into_primitive().tensor();
        let beta = beta.map(|b| b.into_primitive().tensor());
        let input = x.primitive.to_contiguous();
        let xs = input.as_slice::<f32>()?;
        let gammas = values(&gamma.primitive);
        let betas = beta.as_ref().map(|b| values(&b.primitive));
        let (output, stats) = normalize(xs, features, epsilon, &gammas, betas.as_deref());
        let output = FlexTensor::from_data(TensorData::new(output, [rows, features]));
        let saved = Saved {
            input,
            features,
            stats,
            gammas,
        };
        // The graph node over the parents `[x, gamma]` or `[x, gamma, beta]` (two arrays of
        // different lengths, hence a macro rather than a function).
        macro_rules! record {
            ($nodes:expr) => {
                match LayerNormBackward
                    .prepare::<C>($nodes)
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish(saved, output),
                    OpsKind::UnTracked(prep) => prep.finish(output),
                }
            };
        }
        let output = match beta {
            Some(beta) => record!([x.node.clone(), gamma.node.clone(), beta.node.clone()]),
            None => record!([x.node.clone(), gamma.node.clone()]),
        };
        Some(Tensor::from_primitive(TensorPrimitive::Float(output)))
    }
}

/// A row's mean and `1 / sqrt(var + epsilon)`.
#[derive(Clone, Copy, Debug)]
struct RowStats {
    mean: f32,
    inv_std: f32,
}

/// What the backward pass reads: the input, each row's statistics and the scale.
#[derive(Clone, Debug)]
struct Saved {
    input: FlexTensor,
    features: usize,
    stats: Vec<RowStats>,
    gammas: Vec<f32>,
}

/// The backward pass of the fused step, for inputs `[x, gamma]` or `[x, gamma, beta]`.
#[derive(Debug)]
struct LayerNormBackward;

impl<const N: usize> Backward<Flex, N> for LayerNormBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = output_gradient(&ops, grads);
        // The inputs in order: x, gamma, and beta when the layer has one.
        let ids = parent_ids(&ops);
        let Saved {
            input,
            features,
            stats,
            gammas,
        } = ops.state;
        let dy = (grad.as_slice::<f32>()).expect("the gradient of an f32 output is f32");
        let xs = input.as_slice::<f32>().expect("the saved input is f32");
        let (dx, [dgamma, dbeta]) = gradients(xs, dy, features, &stats, &gammas);
        let gradients = [
            (dx, vec![stats.len(), features]),
            (dgamma, vec![features]),
            (dbeta, vec![features]),
        ];
        register(grads, ids, gradients);
    }
}

/// The layer's output and each row's statistics.
fn normalize(
    xs: &[f32],
    features: usize,
    epsilon: f64,
    gammas: &[f32],
    betas: Option<&[f32]>,
) -> (Vec<f32>, Vec<RowStats>) {
    let rows = xs.len() / features.max(1);
    let stats: Vec<RowStats> = (xs.par_chunks(features.max(1)))
        .map(|row| {
            let mean = lane_sum(row, |x| x) / features as f64;
            let m = mean as f32;
            let var = lane_sum(row, |x| (x - m) * (x - m)) / features as f64;
            RowStats {
                mean: m,
                inv_std: (1.0 / (var + epsilon).sqrt()) as f32,
            }
        })
        .collect();
    let no_shift = vec![0.0f32; if betas.is_some() { 0 } else { features }];
    let betas = betas.unwrap_or(&no_shift);
    let (output, _) = per_block(rows, features, |first, out| {
        for (i, out) in out.chunks_mut(features).enumerate() {
            let RowStats { mean, inv_std } = stats[first + i];
            let row = &xs[(first + i) * features..][..features];
            for (((y, &x), &w), &b) in out.iter_mut().zip(row).zip(gammas).zip(betas) {
                y.write((x - mean) * inv_std * w + b);
            }
        }
    });
    (output, stats)
}

/// The input's gradient, and `gamma`'s and `beta`'s (`Σ dy·x̂` and `Σ dy` over the rows):
/// `dx = inv_std · (g − mean(g) − x̂ · mean(g·x̂))` per row, with `g = dy · gamma` and
/// `x̂ = (x − mean) · inv_std`.
fn gradients(
    xs: &[f32],
    dy: &[f32],
    features: usize,
    stats: &[RowStats],
    gammas: &[f32],
) -> (Vec<f32>, [Vec<f32>; 2]) {
    let (dx, partials) = per_block(stats.len(), features, |first, out| {
        let mut sums = vec![0.0f32; 2 * features];
        let (dgamma, dbeta) = sums.split_at_mut(features);
        let mut scaled = vec![0.0f32; features];
        for (i, out) in out.chunks_mut(features).enumerate() {
            let RowStats { mean, inv_std } = stats[first + i];
            let at = (first + i) * features;
            let (x, g) = (&xs[at..][..features], &dy[at..][..features]);
            for ((s, &g), &w) in scaled.iter_mut().zip(g).zip(gammas) {
                *s = g * w;
            }
            let mean_g = (lane_sum(&scaled, |s| s) / features as f64) as f32;
            let projected = lane_dot(x, &scaled, |x, s| (x - mean) * inv_std * s);
            let mean_gx = (projected / features as f64) as f32;
            for j in 0..features {
                let xhat = (x[j] - mean) * inv_std;
                out[j].write(inv_std * (scaled[j] - mean_g - xhat * mean_gx));
                dgamma[j] += g[j] * xhat;
                dbeta[j] += g[j];
            }
        }
        sums
    });
    let mut dgamma = vec![0.0f64; features];
    let mut dbeta = vec![0.0f64; features];
    for sums in &partials {
        for j in 0..features {
            dgamma[j] += f64::from(sums[j]);
            dbeta[j] += f64::from(sums[features + j]);
        }
    }
    let narrow = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    (dx, [narrow(dgamma), narrow(dbeta)])
}

/// A `[rows, features]` tensor written block by block by `f(first row, block)`, which must
/// write every value of its block and returns what the block adds up; the blocks' results in
/// order. Each block on a thread.
fn per_block<R: Send>(
    rows: usize,
    features: usize,
    f: impl Fn(usize, &mut [MaybeUninit<f32>]) -> R + Sync,
) -> (Vec<f32>, Vec<R>) {
    filled(rows * features, BLOCK * features, |b, block| {
        f(b * BLOCK, block)
    })
}
