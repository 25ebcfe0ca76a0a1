//! Batch normalization's training step on burn-flex as fused loops: the forward pass reads the
//! activations twice (statistics, then output) and the backward pass twice (two sums per
//! channel, then the input's gradient), where burn-nn's composition of tensor ops makes about
//! ten full passes forward and twenty backward.
//!
//! Sums run per channel in a fixed order (lanes of 16 within a row, rows added in `f64`), so
//! results do not depend on the number of threads.

use std::mem::MaybeUninit;

use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_flex::{Flex, FlexTensor};
use ember_core::nn::{BatchNormKernel, BatchNormStats};
use rayon::prelude::*;

use crate::fused::{filled, lane_dot, lane_sum, output_gradient, parent_ids, register, values};

/// The CPU's batch-norm kernel, for `Autodiff<Flex, C>`: f32 inputs only (others go through
/// burn's ops).
pub struct CpuBatchNorm;

impl<C: CheckpointStrategy> BatchNormKernel<Autodiff<Flex, C>> for CpuBatchNorm {
    fn train(
        &self,
        x: Tensor<Autodiff<Flex, C>, 3>,
        gamma: Tensor<Autodiff<Flex, C>, 1>,
        beta: Tensor<Autodiff<Flex, C>, 1>,
        epsilon: f64,
    ) -> Option<BatchNormStats<Autodiff<Flex, C>>> {
        if [x.dtype(), gamma.dtype(), beta.dtype()] != [DType::F32; 3] {
            return None;
        }
        let device = x.device();
        let [batch, channels, rows] = x.dims();
        let x = x.into_primitive().tensor();
        let gamma = gamma.into_primitive().tensor();
        let beta = beta.into_primitive().tensor();
        let input = x.primitive.to_contiguous();
        let shape = Shape {
            batch,
            channels,
            rows,
        };
        let xs = input.as_slice::<f32>()?;
        let stats = channel_stats(xs, shape, epsilon);
        let gammas = values(&gamma.primitive);
        let betas = values(&beta.primitive);
        let output = normalize(xs, shape, &stats, &gammas, &betas);
        let output = FlexTensor::from_data(TensorData::new(output, [batch, channels, rows]));
        let nodes = [x.node.clone(), gamma.node.clone(), beta.node.clone()];
        let output = match BatchNormBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let saved = Saved {
                    input,
                    shape,
                    stats: stats.clone(),
                    gammas,
                };
                prep.finish(saved, output)
            }
            OpsKind::UnTracked(prep) => prep.finish(output),
        };
        let per_channel = |value: fn(&ChannelStats) -> f32| {
            let data: Vec<f32> = stats.iter().map(value).collect();
            Tensor::from_data(TensorData::new(data, [channels]), &device)
        };
        Some(BatchNormStats {
            output: Tensor::from_primitive(TensorPrimitive::Float(output)),
            mean: per_channel(|s| s.mean as f32),
            var: per_channel(|s| s.var as f32),
        })
    }
}

/// An input's dimensions: `[batch, channels, rows]`.
#[derive(Clone, Copy, Debug)]
struct Shape {
    batch: usize,
    channels: usize,
    rows: usize,
}

/// One channel's batch statistics.
#[derive(Clone, Copy, Debug)]
struct ChannelStats {
    mean: f64,
    /// The biased variance.
    var: f64,
    /// `1 / sqrt(var + epsilon)`.
    inv_std: f64,
}

/// What the backward pass reads: the input, its statistics and the scale.
#[derive(Clone, Debug)]
struct Saved {
    input: FlexTensor,
    shape: Shape,
    stats: Vec<ChannelStats>,
    gammas: Vec<f32>,
}

/// The backward pass of the fused training step, for inputs `[x, gamma, beta]`.
#[derive(Debug)]
struct BatchNormBackward;

impl Backward<Flex, 3> for BatchNormBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = output_gradient(&ops, grads);
        let ids = parent_ids(&ops);
        let Saved {
            input,
            shape,
            stats,
            gammas,
        } = ops.state;
        let dy = (grad.as_slice::<f32>()).expect("the gradient of an f32 output is f32");
        let xs = input.as_slice::<f32>().expect("the saved input is f32");
        let sums = gradient_sums(xs, dy, shape, &stats);
        // An input that wants no gradient (a batch norm over the data itself) costs no pass.
        let dx = match ids[0] {
            Some(_) => input_gradient(xs, dy, shape, &stats, &sums, &gammas),
            None => Vec::new(),
        };
        let dgamma = (sums.iter().zip(&stats)).map(|(s, st)| (s.dy_centered * st.inv_std) as f32);
        let dbeta = sums.iter().map(|s| s.dy as f32);
        let channels = vec![shape.channels];
        let gradients = [
            (dx, vec![shape.batch, shape.channels, shape.rows]),
            (dgamma.collect(), channels.clone()),
            (dbeta.collect(), channels),
        ];
        register(grads, ids, gradients);
    }
}

/// A channel's sums for the backward pass: `Σ dy` and `Σ dy·(x − mean)`.
struct GradientSums {
    dy: f64,
    dy_centered: f64,
}

/// The rows of channel `c`: one slice of `rows` values per batch item.
fn channel_rows(xs: &[f32], shape: Shape, c: usize) -> impl Iterator<Item = &[f32]> {
    let item = shape.channels * shape.rows;
    (0..shape.batch).map(move |n| &xs[n * item + c * shape.rows..][..shape.rows])
}

/// Each channel's mean and biased variance (two passes: the mean, then the squared deviations).
fn channel_stats(xs: &[f32], shape: Shape, epsilon: f64) -> Vec<ChannelStats> {
    let count = (shape.batch * shape.rows) as f64;
    (0..shape.channels)
        .into_par_iter()
        .map(|c| {
            let sum: f64 = channel_rows(xs, shape, c)
                .map(|row| lane_sum(row, |x| x))
                .sum();
            let mean = sum / count;
            let m = mean as f32;
            let squares: f64 = channel_rows(xs, shape, c)
                .map(|row| lane_sum(row, |x| (x - m) * (x - m)))
                .sum();
            let var = squares / count;
            ChannelStats {
                mean,
                var,
                inv_std: 1.0 / (var + epsilon).sqrt(),
            }
        })
        .collect()
}

/// `(x − mean) · gamma / sqrt(var + epsilon) + beta`, each batch item on a thread of its own.
fn normalize(
    xs: &[f32],
    shape: Shape,
    stats: &[ChannelStats],
    gammas: &[f32],
    betas: &[f32],
) -> Vec<f32> {
    per_row(shape, |c, at, y| {
        let mean = stats[c].mean as f32;
        let scale = (stats[c].inv_std * f64::from(gammas[c])) as f32;
        let shift = betas[c];
        for (y, &x) in y.iter_mut().zip(&xs[at..]) {
            y.write((x - mean) * scale + shift);
        }
    })
}

/// Each channel's [`GradientSums`].
fn gradient_sums(
    xs: &[f32],
    dy: &[f32],
    shape: Shape,
    stats: &[ChannelStats],
) -> Vec<GradientSums> {
    (0..shape.channels)
        .into_par_iter()
        .map(|c| {
            let mean = stats[c].mean as f32;
            let rows = channel_rows(xs, shape, c).zip(channel_rows(dy, shape, c));
            let (mut sum, mut centered) = (0.0, 0.0);
            for (x, g) in rows {
                sum += lane_sum(g, |g| g);
                centered += lane_dot(x, g, |x, g| (x - mean) * g);
            }
            GradientSums {
                dy: sum,
                dy_centered: centered,
            }
        })
        .collect()
}

/// The input's gradient: `gamma / std · (dy − Σdy / M − (x − mean) / std² · Σdy·(x − mean) / M)`
/// for the `M` values of each channel.
fn input_gradient(
    xs: &[f32],
    dy: &[f32],
    shape: Shape,
    stats: &[ChannelStats],
    sums: &[GradientSums],
    gammas: &[f32],
) -> Vec<f32> {
    let count = (shape.batch * shape.rows) as f64;
    let terms: Vec<[f32; 4]> = (stats.iter().zip(sums).zip(gammas))
        .map(|((st, s), &gamma)| {
            let scale = f64::from(gamma) * st.inv_std;
            let mean_dy = s.dy / count;
            let slope = st.inv_std * st.inv_std * s.dy_centered / count;
            [st.mean as f32, scale as f32, mean_dy as f32, slope as f32]
        })
        .collect();
    per_row(shape, |c, at, dx| {
        let [mean, scale, mean_dy, slope] = terms[c];
        for ((dx, &x), &g) in dx.iter_mut().zip(&xs[at..]).zip(&dy[at..]) {
            dx.write(scale * (g - mean_dy - (x - mean) * slope));
        }
    })
}

/// A tensor's values written row by row by `f(channel, offset, row)`, which must write every
/// value of the row that starts at `offset`; each batch item on a thread.
fn per_row(shape: Shape, f: impl Fn(usize, usize, &mut [MaybeUninit<f32>]) + Sync) -> Vec<f32> {
    let item = shape.channels * shape.rows;
    let (out, _) = filled(shape.batch * item, item, |n, values| {
        for (c, row) in values.chunks_mut(shape.rows.max(1)).enumerate() {
            f(c, n * item + c * shape.rows, row);
        }
    });
    out
}
