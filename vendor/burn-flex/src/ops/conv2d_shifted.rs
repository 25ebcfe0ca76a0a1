//! 2-D convolutions of stride 1 as one GEMM per kernel position, without unfolding.
//!
//! With stride 1 the input under kernel position `(ky, kx)` at output `(oy, ox)` is the padded
//! input at `(oy + ky·dil_h, ox + kx·dil_w)`. Each batch item's planes are copied once into
//! zero-padded planes `wp = in_w + 2·pad_w` wide; on that grid output position `oy·wp + ox`
//! reads padded position `oy·wp + ox + shift`, with one fixed `shift = ky·dil_h·wp + kx·dil_w`
//! per kernel position. A tile of output rows is then the sum over kernel positions of
//! `W[:, :, ky, kx] · padded[:, tile + shift]`: one GEMM each, whose input operand is read where
//! it lies (a run of positions per channel, the channels a plane apart), so no patch matrix is
//! built (nine copies of the input for a 3×3 kernel) and none is repacked. The grid's
//! `wp − out_w` extra columns per row are computed and dropped when a tile is copied into the
//! output planes.
//!
//! A group of fewer than [`FEW_CHANNELS`] input channels (an image model's RGB stem) would
//! give each of those GEMMs an inner dimension of a few values, so that the kernel loads and
//! stores its output tile for a handful of multiply-adds each time. Such a tile instead copies
//! its shifted runs into one operand of `k_h · k_w · cpg` rows and runs one GEMM over all of
//! them. Its weight gradient is built from the same runs: the output gradient spread onto the
//! padded grid (zero in the extra columns) times those rows, one GEMM per tile whose inner
//! dimension is the tile's positions.
//!
//! The input gradient of a stride-1 convolution is such a convolution too (of the output
//! gradient by the kernel turned half a turn, channels swapped), so it runs here as well.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_std::{Bytes, Shape};
use core::mem::MaybeUninit;
use core::ops::Range;

use super::conv2d_gemm::{Geometry, for_each_chunk, gemm_on_thread, transpose_blocks};
use crate::{FlexTensor, Layout};

/// Positions per GEMM are rounded up to a multiple of this (the f32 kernel's vector length),
/// so that the GEMM reads its input operand in place instead of packing it first.
const LANES: usize = 16;

/// Output positions (of the padded grid) per tile, about.
const TILE_POSITIONS: usize = 256;

/// Channel groups narrower than this run one GEMM per tile over unfolded kernel positions
/// instead of one per kernel position.
const FEW_CHANNELS: usize = 8;

/// Whether a convolution's weight gradient runs here ([`weight_grad_partials`]): stride 1 and
/// groups of fewer than [`FEW_CHANNELS`] input channels.
pub(super) fn takes_weight_grad(geo: &Geometry) -> bool {
    geo.stride == [1, 1] && geo.in_per_group() < FEW_CHANNELS
}

/// Where one group of one item lies once padded.
struct PaddedGrid {
    /// Rows and columns of a padded plane.
    hp: usize,
    wp: usize,
    /// Distance between two channels' planes: a plane and the slack that a tile's rounded-up
    /// positions read past the last plane's end.
    plane: usize,
}

impl PaddedGrid {
    fn new(geo: &Geometry) -> Self {
        let (hp, wp) = (geo.in_h + 2 * geo.padding[0], geo.in_w + 2 * geo.padding[1]);
        let slack = geo.k_w.saturating_sub(1) * geo.dilation[1] + LANES;
        Self {
            hp,
            wp,
            plane: hp * wp + slack,
        }
    }

    /// Copies group `g`'s channels of one item's planes `x` (`[c_in, in_h, in_w]`) inside the
    /// borders of `padded`, whose borders and slack are zero and stay so.
    fn fill<T: Copy>(&self, geo: &Geometry, x: &[T], g: usize, padded: &mut [T]) {
        let (cpg, plane) = (geo.in_per_group(), geo.in_plane());
        let [pad_h, pad_w] = geo.padding;
        for c in 0..cpg {
            let from = &x[(g * cpg + c) * plane..][..plane];
            let to = &mut padded[c * self.plane..][..self.hp * self.wp];
            for (iy, row) in from.chunks_exact(geo.in_w).enumerate() {
                to[(iy + pad_h) * self.wp + pad_w..][..geo.in_w].copy_from_slice(row);
            }
        }
    }

    /// How far the input under kernel position `k` (`ky · k_w + kx`) lies from the output
    /// position on the padded grid.
    fn shift(&self, geo: &Geometry, k: usize) -> usize {
        let (ky, kx) = (k / geo.k_w, k % geo.k_w);
        ky * geo.dilation[0] * self.wp + kx * geo.dilation[1]
    }

    /// Copies the `m` positions from `first` under every kernel position of every channel of
    /// `padded` into the rows of `unfolded` (`[k_h · k_w, cpg, m]`).
    fn unfold<T: Copy>(
        &self,
        geo: &Geometry,
        padded: &[T],
        first: usize,
        m: usize,
        unfolded: &mut [T],
    ) {
        let cpg = geo.in_per_group();
        for (row, to) in unfolded.chunks_exact_mut(m).take(geo.patch()).enumerate() {
            let (k, c) = (row / cpg, row % cpg);
            to.copy_from_slice(&padded[c * self.plane + first + self.shift(geo, k)..][..m]);
        }
    }

    /// Copies one group's output gradient `dy_g` (`[opg, out_h, out_w]`) at the output `rows`
    /// into `spread` (`[opg, m]`) on the padded grid's `wp`-wide rows, zero in the extra
    /// columns and past the last row.
    fn spread<T: Copy>(
        &self,
        geo: &Geometry,
        dy_g: &[T],
        rows: Range<usize>,
        m: usize,
        zero: T,
        spread: &mut [T],
    ) {
        let positions = geo.positions();
        for (o, to) in spread
            .chunks_exact_mut(m)
            .take(geo.out_per_group())
            .enumerate()
        {
            let from = &dy_g[o * positions..][..positions];
            let (grid_rows, tail) = to.split_at_mut(rows.len() * self.wp);
            for (row, oy) in grid_rows.chunks_exact_mut(self.wp).zip(rows.clone()) {
                let (values, extra) = row.split_at_mut(geo.out_w);
                values.copy_from_slice(&from[oy * geo.out_w..][..geo.out_w]);
                extra.fill(zero);
            }
            tail.fill(zero);
        }
    }

    /// Positions one GEMM computes for the output `rows`: their padded-grid rows, rounded up
    /// to whole vectors.
    fn tile_len(&self, rows: &Range<usize>) -> usize {
        (rows.len() * self.wp).next_multiple_of(LANES)
    }

    /// The largest [`tile_len`](Self::tile_len) over the tiles, what scratch buffers hold.
    fn longest_tile(&self, geo: &Geometry) -> usize {
        self.tiles(geo)
            .map(|rows| self.tile_len(&rows))
            .max()
            .unwrap_or(0)
    }

    /// The output rows of each tile.
    fn tiles(&self, geo: &Geometry) -> impl Iterator<Item = Range<usize>> + use<> {
        let step = (TILE_POSITIONS / self.wp).clamp(1, geo.out_h.max(1));
        let end = geo.out_h;
        (0..end)
            .step_by(step)
            .map(move |start| start..(start + step).min(end))
    }
}

/// The weight `[c_out, cpg, k_h, k_w]` as one `[opg, cpg]` matrix per group and kernel
/// position (`[groups, k_h · k_w, opg, cpg]`).
fn per_kernel_position<T: Copy>(w: &[T], geo: &Geometry, zero: T) -> Vec<T> {
    let (opg, cpg, kernel) = (geo.out_per_group(), geo.in_per_group(), geo.k_h * geo.k_w);
    let mut out = vec![zero; w.len()];
    for g in 0..geo.groups {
        for o in 0..opg {
            for c in 0..cpg {
                for k in 0..kernel {
                    let from = ((g * opg + o) * cpg + c) * kernel + k;
                    out[((g * kernel + k) * opg + o) * cpg + c] = w[from];
                }
            }
        }
    }
    out
}

/// The stride-1 convolution of `x` (`[batch, c_in, in_h, in_w]`, contiguous) by `w`
/// (`[c_out, c_in / groups, k_h, k_w]`, contiguous) into `out` (`[batch, c_out, out_h,
/// out_w]`), every element of which it writes.
pub(super) fn conv2d<T>(
    x: &[T],
    w: &[T],
    geo: &Geometry,
    [zero, one]: [T; 2],
    out: &mut [MaybeUninit<T>],
) where
    T: bytemuck::Pod + Send + Sync + 'static,
{
    debug_assert_eq!(geo.stride, [1, 1]);
    let grid = PaddedGrid::new(geo);
    let (opg, cpg, positions) = (geo.out_per_group(), geo.in_per_group(), geo.positions());
    let unfold = cpg < FEW_CHANNELS;
    let reordered;
    let w = if unfold {
        reordered = transpose_blocks(w, geo.c_out, [cpg, geo.k_h * geo.k_w], zero);
        &reordered[..]
    } else {
        reordered = per_kernel_position(w, geo, zero);
        &reordered[..]
    };
    let item_in = geo.c_in * geo.in_plane();
    let tile_len = grid.longest_tile(geo);
    let unfolded_len = if unfold { geo.patch() * tile_len } else { 0 };
    let scratch = || {
        let padded = vec![zero; cpg * grid.plane];
        (padded, vec![zero; opg * tile_len], vec![zero; unfolded_len])
    };
    for_each_chunk(
        out,
        geo.c_out * positions,
        scratch,
        |(padded, sums, unfolded), (b, out_b)| {
            let x_b = &x[b * item_in..(b + 1) * item_in];
            for g in 0..geo.groups {
                grid.fill(geo, x_b, g, padded);
                let w_g = &w[g * opg * cpg * geo.k_h * geo.k_w..];
                for rows in grid.tiles(geo) {
                    let m = grid.tile_len(&rows);
                    let first = rows.start * grid.wp;
                    if unfold {
                        grid.unfold(geo, padded, first, m, unfolded);
                        tile_by_one_gemm(geo, w_g, unfolded, m, sums, [zero, one]);
                    } else {
                        tile_by_kernel_position(
                            geo,
                            &grid,
                            w_g,
                            padded,
                            first,
                            m,
                            sums,
                            [zero, one],
                        );
                    }
                    for o in 0..opg {
                        let out_o = &mut out_b[(g * opg + o) * positions..][..positions];
                        for (r, oy) in rows.clone().enumerate() {
                            let from = &sums[o * m + r * grid.wp..][..geo.out_w];
                            let to = &mut out_o[oy * geo.out_w..][..geo.out_w];
                            for (slot, &v) in to.iter_mut().zip(from) {
                                slot.write(v);
                            }
                        }
                    }
                }
            }
        },
    );
}

/// A tile's sums `[opg, m]` from the tile starting at padded position `first`: one GEMM per
/// kernel position, `w_g` one group's weight as [`per_kernel_position`] orders it.
#[allow(clippy::too_many_arguments)]
fn tile_by_kernel_position<T: Copy + 'static>(
    geo: &Geometry,
    grid: &PaddedGrid,
    w_g: &[T],
    padded: &[T],
    first: usize,
    m: usize,
    sums: &mut [T],
    zero_one: [T; 2],
) {
    let (opg, cpg) = (geo.out_per_group(), geo.in_per_group());
    for k in 0..geo.k_h * geo.k_w {
        let start = first + grid.shift(geo, k);
        // sums[opg, m] (+)= w[g, k][opg, cpg] · padded[cpg, start..start + m]
        // SAFETY: `sums` holds opg · m ≤ opg · tile_len values; the weight block opg · cpg; the
        // last channel's run ends at most at (hp − 1)·wp + (k_w − 1)·dil_w + wp − 1 + LANES,
        // inside its plane and slack.
        unsafe {
            gemm_on_thread(
                [opg, m, cpg],
                sums.as_mut_ptr(),
                [m as isize, 1],
                k > 0,
                w_g[k * opg * cpg..].as_ptr(),
                [cpg as isize, 1],
                padded[start..].as_ptr(),
                [grid.plane as isize, 1],
                zero_one,
            );
        }
    }
}

/// A tile's sums `[opg, m]` by one GEMM over its unfolded runs (`[k_h · k_w · cpg, m]`, what
/// [`PaddedGrid::unfold`] wrote), `w_g` one group's weight in the same order
/// (`[opg, k_h · k_w, cpg]`).
fn tile_by_one_gemm<T: Copy + 'static>(
    geo: &Geometry,
    w_g: &[T],
    unfolded: &[T],
    m: usize,
    sums: &mut [T],
    zero_one: [T; 2],
) {
    let (opg, inner) = (geo.out_per_group(), geo.patch());
    assert!(sums.len() >= opg * m && unfolded.len() >= inner * m && w_g.len() >= opg * inner);
    // sums[opg, m] = w[g][opg, inner] · unfolded[inner, m]
    // SAFETY: the assertion above bounds all three operands.
    unsafe {
        gemm_on_thread(
            [opg, m, inner],
            sums.as_mut_ptr(),
            [m as isize, 1],
            false,
            w_g.as_ptr(),
            [inner as isize, 1],
            unfolded.as_ptr(),
            [m as isize, 1],
            zero_one,
        );
    }
}

/// The weight gradient's partial sums, `[chunks, c_out, k_h · k_w, cpg]`, of a convolution
/// [`takes_weight_grad`] accepts, of `x` (`[batch, c_in, in_h, in_w]`) with output gradient `dy`
/// (`[batch, c_out, out_h, out_w]`), both contiguous: chunk `i` sums items `i · per_chunk` up to
/// the next chunk's first. Per tile of an item's output rows, one GEMM: the output gradient
/// spread onto the padded grid times its unfolded input. Each extra column of the grid adds
/// zero times an input value, which stays zero unless that value is infinite or NaN.
pub(super) fn weight_grad_partials<T>(
    x: &[T],
    dy: &[T],
    geo: &Geometry,
    [per_chunk, chunks]: [usize; 2],
    [zero, one]: [T; 2],
) -> Vec<T>
where
    T: bytemuck::Pod + Send + Sync + 'static,
{
    debug_assert!(takes_weight_grad(geo));
    let grid = PaddedGrid::new(geo);
    let (opg, cpg, patch) = (geo.out_per_group(), geo.in_per_group(), geo.patch());
    let (item_in, item_out) = (geo.c_in * geo.in_plane(), geo.c_out * geo.positions());
    let grad_len = geo.c_out * patch;
    let tile_len = grid.longest_tile(geo);
    let mut partials = vec![zero; chunks * grad_len];
    if grad_len == 0 {
        return partials;
    }
    let scratch = || {
        let padded = vec![zero; cpg * grid.plane];
        (
            padded,
            vec![zero; opg * tile_len],
            vec![zero; patch * tile_len],
        )
    };
    for_each_chunk(
        &mut partials,
        grad_len,
        scratch,
        |(padded, spread, unfolded), (chunk, sum)| {
            let items = geo.chunk_items(chunk, per_chunk);
            for (i, b) in items.enumerate() {
                for g in 0..geo.groups {
                    grid.fill(geo, &x[b * item_in..][..item_in], g, padded);
                    let dy_g = &dy[b * item_out + g * opg * geo.positions()..];
                    for (t, rows) in grid.tiles(geo).enumerate() {
                        let m = grid.tile_len(&rows);
                        grid.unfold(geo, padded, rows.start * grid.wp, m, unfolded);
                        grid.spread(geo, dy_g, rows, m, zero, spread);
                        let sum_g = &mut sum[g * opg * patch..][..opg * patch];
                        assert!(spread.len() >= opg * m && unfolded.len() >= patch * m);
                        // sum_g[opg, patch] (+)= spread[opg, m] · unfoldedᵀ[m, patch]
                        // SAFETY: the slice and the assertion above bound all three operands.
                        unsafe {
                            gemm_on_thread(
                                [opg, patch, m],
                                sum_g.as_mut_ptr(),
                                [patch as isize, 1],
                                i > 0 || t > 0,
                                spread.as_ptr(),
                                [m as isize, 1],
                                unfolded.as_ptr(),
                                [1, m as isize],
                                [zero, one],
                            );
                        }
                    }
                }
            }
        },
    );
    partials
}

/// The options under which the gradient of the input of a convolution with `options` and a
/// `kernel`-sized weight is itself a stride-1 convolution (of the output gradient, by
/// [`flipped`]): stride 1 and a padding of at most `dilation · (kernel − 1)` on each side, the
/// output gradient then padded by the difference. `None` otherwise.
pub(crate) fn x_grad_options(
    options: &ConvOptions<2>,
    kernel: [usize; 2],
) -> Option<ConvOptions<2>> {
    if options.stride != [1, 1] {
        return None;
    }
    let reach = |i: usize| options.dilation[i] * kernel[i].saturating_sub(1);
    let padding = [
        reach(0).checked_sub(options.padding[0])?,
        reach(1).checked_sub(options.padding[1])?,
    ];
    Some(ConvOptions::new(
        [1, 1],
        padding,
        options.dilation,
        options.groups,
    ))
}

/// The input gradient of a convolution whose input gradient is a stride-1 convolution under
/// `options` (what [`x_grad_options`] gave): the output gradient convolved by [`flipped`].
pub(crate) fn x_grad<T>(
    output_grad: FlexTensor,
    weight: FlexTensor,
    options: &ConvOptions<2>,
    dtype: DType,
    zero_one: [T; 2],
) -> FlexTensor
where
    T: bytemuck::Pod + burn_backend::Element + Send + Sync + core::ops::Add<Output = T> + 'static,
{
    let w = flipped::<T>(weight, options.groups, dtype);
    super::conv2d_gemm::conv2d(output_grad, w, None, options, dtype, zero_one)
}

/// The weight `[c_out, c_in / groups, k_h, k_w]` of a convolution as the weight of the
/// convolution that gives its input gradient: `[c_in, c_out / groups, k_h, k_w]`, each
/// group's input and output channels swapped and the kernel turned half a turn.
fn flipped<T: bytemuck::Pod + burn_backend::Element>(
    weight: FlexTensor,
    groups: usize,
    dtype: DType,
) -> FlexTensor {
    let weight = weight.to_contiguous();
    let [c_out, cpg, k_h, k_w]: [usize; 4] = weight.layout().shape().dims();
    let w: &[T] = weight.storage();
    let (opg, kernel) = (c_out / groups, k_h * k_w);
    let mut out: Vec<T> = Vec::with_capacity(w.len());
    for g in 0..groups {
        for c in 0..cpg {
            for o in 0..opg {
                let from = &w[((g * opg + o) * cpg + c) * kernel..][..kernel];
                out.extend(from.iter().rev());
            }
        }
    }
    let shape = Shape::from(vec![groups * cpg, opg, k_h, k_w]);
    FlexTensor::new(Bytes::from_elems(out), Layout::contiguous(shape), dtype)
}
