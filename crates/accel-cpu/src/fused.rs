//! What the CPU's fused kernels share: row sums in a fixed order, output buffers written in
//! parallel without zero-filling, and the tensors they read and hand to burn-autodiff.

use std::mem::MaybeUninit;

use burn::tensor::TensorData;
use burn_autodiff::NodeId;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::Ops;
use burn_flex::{Flex, FlexTensor};
use rayon::prelude::*;

/// Lanes a row is summed in (vectorised; their order is fixed).
const LANES: usize = 16;

/// `Σ f(x)` over `row`, in [`LANES`] running f32 sums added in f64.
pub(crate) fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut lanes = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += f(x);
        }
    }
    let tail: f64 = tail.iter().map(|&x| f64::from(f(x))).sum();
    lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + tail
}

/// `Σ f(a, b)` over two rows of one length, as [`lane_sum`].
pub(crate) fn lane_dot(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f64 {
    let mut lanes = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f64 = (ca.remainder().iter().zip(cb.remainder()))
        .map(|(&x, &y)| f64::from(f(x, y)))
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((lane, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += f(x, y);
        }
    }
    lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + tail
}

/// `len` values written in chunks of `chunk` by `f(chunk index, chunk)`, which must write every
/// value of its chunk; each chunk on a thread. Also returns what each chunk returned, in order.
pub(crate) fn filled<R: Send>(
    len: usize,
    chunk: usize,
    f: impl Fn(usize, &mut [MaybeUninit<f32>]) -> R + Sync,
) -> (Vec<f32>, Vec<R>) {
    let mut out = Vec::with_capacity(len);
    let chunks = out.spare_capacity_mut()[..len].par_chunks_mut(chunk.max(1));
    let results = chunks.enumerate().map(|(i, c)| f(i, c)).collect();
    // SAFETY: `f` wrote every value of every chunk, and the chunks cover `0..len`.
    unsafe { out.set_len(len) };
    (out, results)
}

/// The f32 values of a small tensor (a layer's `gamma` or `beta`).
pub(crate) fn values(tensor: &FlexTensor) -> Vec<f32> {
    tensor
        .clone()
        .into_data()
        .into_vec::<f32>()
        .expect("an f32 tensor")
}

/// The gradient of a fused op's (f32) output, contiguous.
pub(crate) fn output_gradient<S, const N: usize>(
    ops: &Ops<S, N>,
    grads: &mut Gradients,
) -> FlexTensor {
    grads.consume::<Flex>(&ops.node).to_contiguous()
}

/// The graph ids of a fused op's inputs, in order (`None` where no gradient is wanted).
pub(crate) fn parent_ids<S, const N: usize>(ops: &Ops<S, N>) -> Vec<Option<NodeId>> {
    (ops.parents.iter())
        .map(|p| p.as_ref().map(|n| n.id))
        .collect()
}

/// Hands each input's gradient (its values and dims) to the input with that id, skipping
/// inputs that want none.
pub(crate) fn register(
    grads: &mut Gradients,
    ids: Vec<Option<NodeId>>,
    gradients: impl IntoIterator<Item = (Vec<f32>, Vec<usize>)>,
) {
    for (id, (values, dims)) in ids.into_iter().zip(gradients) {
        if let Some(id) = id {
            let tensor = FlexTensor::from_data(TensorData::new(values, dims));
            grads.register::<Flex>(id, tensor);
        }
    }
}
