//! 2-D convolution and its weight gradient as one GEMM per batch item and group (a
//! stride-1 convolution's forward pass, and its weight gradient where a group has only a few
//! input channels, run in [`conv2d_shifted`](super::conv2d_shifted)).
//!
//! Each batch item's input is turned channels-last once, unfolded into a matrix of one row per
//! output position (its patch, kernel position outer and channel inner), and multiplied by the
//! weight laid out the same way: for the forward pass straight into the item's output planes,
//! for the weight gradient into a partial sum of `dY · patches` over a fixed chunk of items.
//! Batch items (forward) and chunks (weight gradient) run in parallel, each GEMM on one thread
//! with its scratch buffers reused across the items a thread takes. The chunks are fixed by the
//! batch size alone and their partial sums are added in order, so the weight gradient does not
//! depend on the number of threads.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_backend::ops::conv::calculate_conv_output_size;
use burn_std::{Bytes, Shape};
use core::ops::Range;

use super::conv_common::add_bias;
use crate::{FlexTensor, Layout};
use channels_last::to_channels_last;

mod channels_last;

/// Partial sums of the weight gradient: the batch is cut into at most this many chunks.
const WEIGHT_GRAD_CHUNKS: usize = 16;

/// Output positions per GEMM (rounded to whole output rows).
const TILE_POSITIONS: usize = 128;

/// The sizes of one 2-D convolution.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    pub(super) batch: usize,
    pub(super) c_in: usize,
    pub(super) in_h: usize,
    pub(super) in_w: usize,
    pub(super) c_out: usize,
    pub(super) k_h: usize,
    pub(super) k_w: usize,
    pub(super) stride: [usize; 2],
    pub(super) padding: [usize; 2],
    pub(super) dilation: [usize; 2],
    pub(super) out_h: usize,
    pub(super) out_w: usize,
    pub(super) groups: usize,
}

impl Geometry {
    fn new(x: &[usize], weight: &[usize], options: &ConvOptions<2>) -> Self {
        let (k_h, k_w) = (weight[2], weight[3]);
        let out = |i: usize, k: usize, size: usize| {
            calculate_conv_output_size(
                k,
                options.stride[i],
                options.padding[i],
                options.dilation[i],
                size,
            )
        };
        Self {
            batch: x[0],
            c_in: x[1],
            in_h: x[2],
            in_w: x[3],
            c_out: weight[0],
            k_h,
            k_w,
            stride: options.stride,
            padding: options.padding,
            dilation: options.dilation,
            out_h: out(0, k_h, x[2]),
            out_w: out(1, k_w, x[3]),
            groups: options.groups,
        }
    }

    pub(super) fn in_plane(&self) -> usize {
        self.in_h * self.in_w
    }

    pub(super) fn positions(&self) -> usize {
        self.out_h * self.out_w
    }

    pub(super) fn in_per_group(&self) -> usize {
        self.c_in / self.groups
    }

    pub(super) fn out_per_group(&self) -> usize {
        self.c_out / self.groups
    }

    /// Length of one patch: kernel positions × input channels of a group.
    pub(super) fn patch(&self) -> usize {
        self.k_h * self.k_w * self.in_per_group()
    }

    /// Fills `patches` (`[positions, patch]`, row-major) with group `g`'s patches at the output
    /// rows `rows` of one item held channels-last in `nhwc` (`[in_h · in_w, c_in]`); entries
    /// that fall in the padding are zero.
    fn unfold<T: Copy>(
        &self,
        nhwc: &[T],
        g: usize,
        rows: Range<usize>,
        zero: T,
        patches: &mut [T],
    ) {
        let (cpg, patch) = (self.in_per_group(), self.patch());
        let first = g * cpg;
        for (r, oy) in rows.enumerate() {
            for ky in 0..self.k_h {
                let iy =
                    (oy * self.stride[0] + ky * self.dilation[0]).wrapping_sub(self.padding[0]);
                for ox in 0..self.out_w {
                    let row = (r * self.out_w + ox) * patch;
                    for kx in 0..self.k_w {
                        let ix = (ox * self.stride[1] + kx * self.dilation[1])
                            .wrapping_sub(self.padding[1]);
                        let to = &mut patches[row + (ky * self.k_w + kx) * cpg..][..cpg];
                        if iy < self.in_h && ix < self.in_w {
                            let from = (iy * self.in_w + ix) * self.c_in + first;
                            to.copy_from_slice(&nhwc[from..from + cpg]);
                        } else {
                            to.fill(zero);
                        }
                    }
                }
            }
        }
    }

    /// The batch items that weight-gradient chunk `chunk` of `per_chunk` items sums.
    pub(super) fn chunk_items(&self, chunk: usize, per_chunk: usize) -> Range<usize> {
        chunk * per_chunk..((chunk + 1) * per_chunk).min(self.batch)
    }

    /// Output rows per GEMM: enough positions to keep the GEMM efficient, few enough that the
    /// patches stay in cache.
    fn rows_per_tile(&self) -> usize {
        (TILE_POSITIONS / self.out_w.max(1)).clamp(1, self.out_h.max(1))
    }

    /// The output rows of each tile.
    fn tiles(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (step, end) = (self.rows_per_tile(), self.out_h);
        (0..end)
            .step_by(step)
            .map(move |start| start..(start + step).min(end))
    }
}

/// `dst[m, n] (= or +=) lhs[m, k] · rhs[k, n]` on this thread, each operand given by its row
/// and column strides.
///
/// # Safety
/// Every operand must hold the elements its sizes and strides reach.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_on_thread<T: Copy + 'static>(
    [m, n, k]: [usize; 3],
    dst: *mut T,
    [dst_rs, dst_cs]: [isize; 2],
    accumulate: bool,
    lhs: *const T,
    [lhs_rs, lhs_cs]: [isize; 2],
    rhs: *const T,
    [rhs_rs, rhs_cs]: [isize; 2],
    [zero, one]: [T; 2],
) {
    let alpha = if accumulate { one } else { zero };
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs,
            dst_rs,
            accumulate,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            alpha,
            one,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Each of `blocks` consecutive `[rows, cols]` matrices of `src` transposed to `[cols, rows]`:
/// the weight's `[c_out, (cpg, k_h · k_w)]` to the patches' `[c_out, (k_h · k_w, cpg)]` order
/// and back.
pub(super) fn transpose_blocks<T: Copy>(
    src: &[T],
    blocks: usize,
    [rows, cols]: [usize; 2],
    zero: T,
) -> Vec<T> {
    let size = rows * cols;
    let mut out = vec![zero; blocks * size];
    for block in 0..blocks {
        for r in 0..rows {
            for c in 0..cols {
                out[block * size + c * rows + r] = src[block * size + r * cols + c];
            }
        }
    }
    out
}

/// Runs `item` for every `(index, chunk)` of `out` cut in `chunk`-long pieces, in parallel
/// where rayon is on, each thread with scratch buffers made by `scratch`.
pub(super) fn for_each_chunk<T, S>(
    out: &mut [T],
    chunk: usize,
    scratch: impl Fn() -> S + Sync + Send,
    item: impl Fn(&mut S, (usize, &mut [T])) + Sync + Send,
) where
    T: Send,
{
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each_init(scratch, item);
    }
    #[cfg(not(feature = "rayon"))]
    {
        let mut buffers = scratch();
        for pair in out.chunks_mut(chunk).enumerate() {
            item(&mut buffers, pair);
        }
    }
}

/// The 2-D convolution of `x` `[n, c_in, h, w]` by `weight` `[c_out, c_in / groups, k_h, k_w]`.
pub(crate) fn conv2d<T>(
    x: FlexTensor,
    weight: FlexTensor,
    bias: Option<FlexTensor>,
    options: &ConvOptions<2>,
    dtype: DType,
    [zero, one]: [T; 2],
) -> FlexTensor
where
    T: bytemuck::Pod
        + burn_backend::Element
        + Copy
        + Send
        + Sync
        + core::ops::Add<Output = T>
        + 'static,
{
    let (x, weight) = (x.to_contiguous(), weight.to_contiguous());
    let geo = Geometry::new(x.layout().shape(), weight.layout().shape(), options);
    let x_data: &[T] = x.storage();
    let (positions, patch, opg) = (geo.positions(), geo.patch(), geo.out_per_group());
    let item_in = geo.c_in * geo.in_plane();
    // Not zero-filled: the GEMMs below write every element (every group's output channels at
    // every tile's positions, for every item) without reading it.
    let len = geo.batch * geo.c_out * positions;
    let mut out: Vec<T> = Vec::with_capacity(len);
    if len > 0 && geo.stride == [1, 1] {
        let out = &mut out.spare_capacity_mut()[..len];
        super::conv2d_shifted::conv2d(x_data, weight.storage(), &geo, [zero, one], out);
    } else if len > 0 {
        let kernel = [geo.in_per_group(), geo.k_h * geo.k_w];
        let w = transpose_blocks(weight.storage::<T>(), geo.c_out, kernel, zero);
        let scratch = || {
            (
                vec![zero; item_in],
                vec![zero; geo.rows_per_tile() * geo.out_w * patch],
            )
        };
        for_each_chunk(
            &mut out.spare_capacity_mut()[..len],
            geo.c_out * positions,
            scratch,
            |(nhwc, patches), (b, out_b)| {
                let x_b = &x_data[b * item_in..(b + 1) * item_in];
                to_channels_last(x_b, geo.c_in, geo.in_plane(), nhwc);
                for g in 0..geo.groups {
                    for rows in geo.tiles() {
                        let (first, count) = (rows.start * geo.out_w, rows.len() * geo.out_w);
                        geo.unfold(nhwc, g, rows, zero, patches);
                        // out_b[g][opg, tile] = w[g][opg, patch] · patchesᵀ[patch, tile]
                        unsafe {
                            gemm_on_thread(
                                [opg, count, patch],
                                out_b[g * opg * positions + first..].as_mut_ptr().cast(),
                                [positions as isize, 1],
                                false,
                                w[g * opg * patch..].as_ptr(),
                                [patch as isize, 1],
                                patches.as_ptr(),
                                [1, patch as isize],
                                [zero, one],
                            );
                        }
                    }
                }
            },
        );
    }
    // SAFETY: the GEMMs wrote all `len` elements (above).
    unsafe { out.set_len(len) };
    if let Some(bias) = bias {
        let bias = bias.to_contiguous();
        add_bias(
            &mut out,
            bias.storage(),
            geo.batch,
            geo.c_out,
            positions,
            |a, b| a + b,
        );
    }
    let shape = Shape::from(vec![geo.batch, geo.c_out, geo.out_h, geo.out_w]);
    FlexTensor::new(Bytes::from_elems(out), Layout::contiguous(shape), dtype)
}

/// The gradient of the weight (`[c_out, c_in / groups, k_h, k_w]`) of the 2-D convolution of
/// `x` with output gradient `output_grad` `[n, c_out, out_h, out_w]`:
/// `dW[o, c, ky, kx] = Σ_b Σ_p dY[b, o, p] · x[b, c, p's input under (ky, kx)]`.
pub(crate) fn conv2d_weight_grad<T>(
    x: FlexTensor,
    output_grad: FlexTensor,
    weight_shape: &[usize],
    options: &ConvOptions<2>,
    dtype: DType,
    [zero, one]: [T; 2],
) -> FlexTensor
where
    T: bytemuck::Pod
        + burn_backend::Element
        + Copy
        + Send
        + Sync
        + core::ops::Add<Output = T>
        + 'static,
{
    let (x, dy) = (x.to_contiguous(), output_grad.to_contiguous());
    let geo = Geometry::new(x.layout().shape(), weight_shape, options);
    assert_eq!(
        dy.layout().shape().to_vec(),
        [geo.batch, geo.c_out, geo.out_h, geo.out_w],
        "conv2d weight gradient: the output gradient's shape does not match the convolution"
    );
    let (x_data, dy_data): (&[T], &[T]) = (x.storage(), dy.storage());
    let per_chunk = geo.batch.div_ceil(WEIGHT_GRAD_CHUNKS).max(1);
    let chunks = geo.batch.div_ceil(per_chunk);
    let grad_len = geo.c_out * geo.patch();
    let mut partials = if super::conv2d_shifted::takes_weight_grad(&geo) {
        super::conv2d_shifted::weight_grad_partials(
            x_data,
            dy_data,
            &geo,
            [per_chunk, chunks],
            [zero, one],
        )
    } else {
        weight_grad_partials(x_data, dy_data, &geo, [per_chunk, chunks], [zero, one])
    };
    // Add the chunks' sums in order, then put each kernel position's channels back in place.
    let (total, rest) = partials.split_at_mut(grad_len.min(chunks * grad_len));
    for partial in rest.chunks(grad_len.max(1)) {
        for (t, &p) in total.iter_mut().zip(partial) {
            *t = *t + p;
        }
    }
    let kernel = [geo.k_h * geo.k_w, geo.in_per_group()];
    let grad = transpose_blocks(total, geo.c_out, kernel, zero);
    FlexTensor::new(
        Bytes::from_elems(grad),
        Layout::contiguous(Shape::from(weight_shape.to_vec())),
        dtype,
    )
}

/// The weight gradient's partial sums, `[chunks, c_out, patch]`, of the convolution of `x`
/// (`[batch, c_in, in_h, in_w]`) with output gradient `dy` (`[batch, c_out, out_h, out_w]`),
/// both contiguous: chunk `i` sums items `i · per_chunk` up to the next chunk's first, each
/// item turned channels-last and unfolded a tile of output rows at a time.
fn weight_grad_partials<T>(
    x: &[T],
    dy: &[T],
    geo: &Geometry,
    [per_chunk, chunks]: [usize; 2],
    [zero, one]: [T; 2],
) -> Vec<T>
where
    T: bytemuck::Pod + Send + Sync + 'static,
{
    let (positions, patch, opg) = (geo.positions(), geo.patch(), geo.out_per_group());
    let item_in = geo.c_in * geo.in_plane();
    let grad_len = geo.c_out * patch;
    let mut partials = vec![zero; chunks * grad_len];
    if grad_len > 0 {
        let scratch = || {
            (
                vec![zero; item_in],
                vec![zero; geo.rows_per_tile() * geo.out_w * patch],
            )
        };
        for_each_chunk(
            &mut partials,
            grad_len,
            scratch,
            |(nhwc, patches), (chunk, sum)| {
                let items = geo.chunk_items(chunk, per_chunk);
                for (i, b) in items.enumerate() {
                    to_channels_last(
                        &x[b * item_in..(b + 1) * item_in],
                        geo.c_in,
                        geo.in_plane(),
                        nhwc,
                    );
                    for g in 0..geo.groups {
                        for (t, rows) in geo.tiles().enumerate() {
                            let (first, count) = (rows.start * geo.out_w, rows.len() * geo.out_w);
                            geo.unfold(nhwc, g, rows, zero, patches);
                            // sum[g][opg, patch] (+)= dY_b[g][opg, tile] · patches[tile, patch]
                            unsafe {
                                gemm_on_thread(
                                    [opg, patch, count],
                                    sum[g * opg * patch..].as_mut_ptr(),
                                    [patch as isize, 1],
                                    i > 0 || t > 0,
                                    dy[(b * geo.c_out + g * opg) * positions + first..].as_ptr(),
                                    [positions as isize, 1],
                                    patches.as_ptr(),
                                    [patch as isize, 1],
                                    [zero, one],
                                );
                            }
                        }
                    }
                }
            },
        );
    }
    partials
}

#[cfg(test)]
mod tests;
