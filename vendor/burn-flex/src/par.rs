//! Element-wise loops over large buffers cut into pieces that run on rayon's threads.
//!
//! Each piece is a consecutive range of elements, computed exactly as the whole loop would
//! compute it, so results do not depend on the number of threads. Buffers below
//! [`PARALLEL_MIN`] elements run on the calling thread: for them the hand-off costs more than
//! it saves.

use alloc::vec::Vec;
use core::mem::MaybeUninit;

/// Elements from which a loop is cut into pieces.
pub(crate) const PARALLEL_MIN: usize = 1 << 18;

/// Elements from which a loop whose every element costs nanoseconds (a random draw) is cut
/// into pieces.
pub(crate) const COSTLY_PARALLEL_MIN: usize = 1 << 14;

/// Elements per piece of a loop over `len` elements (all of them below `min`), a multiple of
/// `align`.
fn piece(len: usize, align: usize, min: usize) -> usize {
    let align = align.max(1);
    #[cfg(feature = "rayon")]
    if len >= min {
        let pieces = 4 * rayon::current_num_threads();
        return len.div_ceil(pieces).max(min / 4).next_multiple_of(align);
    }
    let _ = min;
    len.max(1).next_multiple_of(align)
}

/// Calls `f(start, piece)` for consecutive pieces of `dst` whose lengths are multiples of
/// `align` (but the last), `start` being the index of the piece's first element; in parallel
/// when `dst` is large. Each piece runs at the CPU's widest vector width ([`widest`]) when `f`
/// is compiled into it: give an element-wise `f` as an `#[inline(always)]` closure.
pub(crate) fn update<E: Send>(
    dst: &mut [E],
    align: usize,
    f: impl Fn(usize, &mut [E]) + Sync + Send,
) {
    update_from(dst, align, PARALLEL_MIN, f)
}

/// [`update`], in parallel from `min` elements.
fn update_from<E: Send>(
    dst: &mut [E],
    align: usize,
    min: usize,
    f: impl Fn(usize, &mut [E]) + Sync + Send,
) {
    let size = piece(dst.len(), align, min);
    #[cfg(feature = "rayon")]
    if size < dst.len() {
        use rayon::prelude::*;
        dst.par_chunks_mut(size).enumerate().for_each(|(i, chunk)| {
            widest(
                #[inline(always)]
                || f(i * size, chunk),
            )
        });
        return;
    }
    for (i, chunk) in dst.chunks_mut(size).enumerate() {
        widest(
            #[inline(always)]
            || f(i * size, chunk),
        );
    }
}

/// Runs `f` compiled for the widest x86-64 vector registers this CPU has (AVX-512, else AVX2),
/// so that the element-wise loop in it vectorises to that width; elsewhere, or without `std`
/// to ask the CPU, `f` as the crate is compiled (SSE2 on x86-64). Every lane computes what the
/// scalar code does (Rust never fuses a multiply and an add on its own, nor reorders a sum),
/// so results are bitwise the same on every path.
#[inline(always)]
fn widest<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: this CPU has AVX-512F.
            return unsafe { x86::avx512(f) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: this CPU has AVX2.
            return unsafe { x86::avx2(f) };
        }
    }
    f()
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
mod x86 {
    /// `f` compiled with AVX-512F (LLVM inlines the closure into this function).
    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// `f` compiled with AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// A vector of `len` elements, each piece written by `fill(start, piece)`, which must write
/// every element of its piece; in parallel when `len` is large.
/// Pieces are cut as [`update`] cuts them.
pub(crate) fn collect<R: Send>(
    len: usize,
    align: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<R>]) + Sync + Send,
) -> Vec<R> {
    collect_from(len, align, PARALLEL_MIN, fill)
}

/// [`collect`] for elements that each cost nanoseconds: in parallel from
/// [`COSTLY_PARALLEL_MIN`] elements.
pub(crate) fn collect_costly<R: Send>(
    len: usize,
    align: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<R>]) + Sync + Send,
) -> Vec<R> {
    collect_from(len, align, COSTLY_PARALLEL_MIN, fill)
}

/// [`collect`], in parallel from `min` elements.
fn collect_from<R: Send>(
    len: usize,
    align: usize,
    min: usize,
    fill: impl Fn(usize, &mut [MaybeUninit<R>]) + Sync + Send,
) -> Vec<R> {
    let mut out = Vec::with_capacity(len);
    update_from(&mut out.spare_capacity_mut()[..len], align, min, fill);
    // SAFETY: `fill` wrote every element of every piece, and the pieces cover `0..len`.
    unsafe { out.set_len(len) };
    out
}

/// Writes `values` into `dst` in order; `dst` must be exactly as long. Inlined into its
/// caller, so that its loop takes the caller's vector width (see [`widest`]).
#[inline(always)]
pub(crate) fn write_all<R>(dst: &mut [MaybeUninit<R>], values: impl Iterator<Item = R>) {
    let mut written = 0;
    for (slot, value) in dst.iter_mut().zip(values) {
        slot.write(value);
        written += 1;
    }
    assert_eq!(
        written,
        dst.len(),
        "a parallel piece was left partly unwritten"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_loops_compute_bitwise_what_scalar_calls_compute() {
        use crate::ops::vector_math::{exp, gelu, gelu_backward};
        let xs: Vec<f32> = (0..100_003)
            .map(|i| (i as f32 - 50_000.0) * 1.7e-3)
            .collect();
        let f = |x: f32| gelu(x) + gelu_backward(x, 0.3) * exp(x) - x.sqrt().max(x * x);
        let wide: Vec<f32> = collect(xs.len(), 1, |at, piece| {
            write_all(piece, xs[at..].iter().map(|&x| f(x)))
        });
        // One opaque call per element: nothing to vectorise.
        let scalar: Vec<f32> = xs.iter().map(|&x| core::hint::black_box(&f)(x)).collect();
        for (i, (w, s)) in wide.iter().zip(&scalar).enumerate() {
            assert_eq!(w.to_bits(), s.to_bits(), "x = {}", xs[i]);
        }
    }

    #[test]
    fn pieces_cover_every_element_once_in_order() {
        for len in [
            0,
            1,
            1000,
            COSTLY_PARALLEL_MIN + 5,
            PARALLEL_MIN,
            3 * PARALLEL_MIN + 17,
        ] {
            let out: Vec<usize> = collect(len, 1, |start, piece| write_all(piece, start..));
            assert_eq!(out, (0..len).collect::<Vec<_>>());
            let mut dst = alloc::vec![0usize; len];
            update(&mut dst, 1, |start, piece| {
                piece
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v += start + i)
            });
            assert_eq!(dst, out);
            let aligned: Vec<usize> = collect(len, 1000, |start, piece| {
                assert!(start % 1000 == 0);
                write_all(piece, start..)
            });
            assert_eq!(aligned, out);
            let costly: Vec<usize> = collect_costly(len, 64, |start, piece| {
                assert!(start % 64 == 0);
                write_all(piece, start..)
            });
            assert_eq!(costly, out);
        }
    }
}
