//! Loop nests for walking strided layouts run by run instead of element by element.
//!
//! [`StridedIter`](crate::strided_index::StridedIter) updates a multi-index per element, which
//! dominates element-wise ops whose operands are broadcast (stride 0 after `expand`) or
//! permuted. Here the layouts of one shape are reduced together instead: size-1 dimensions are
//! dropped and adjacent dimensions are merged wherever the merge holds for every operand. What
//! is left is a few outer dimensions around an inner run; the outer ones are walked by an
//! odometer once per run, and the inner run is a plain loop specialised on its strides, which
//! the compiler vectorises.
//!
//! Example: `x[64, 32, 8, 8] * g[1, 32, 1, 1]` (BatchNorm's scale, `g` expanded to strides
//! `[0, 1, 0, 0]`) becomes a nest of shape `[64, 32, 64]`: 2048 runs of 64 contiguous `x`
//! values against one value of `g`.

use alloc::vec::Vec;
use core::mem::MaybeUninit;
use core::ops::Range;

use crate::par;

use crate::layout::Layout;

/// The highest rank handled; callers fall back to the strided iterator above it.
pub(crate) const MAX_RANK: usize = 8;

/// Two same-shape layouts reduced to a joint loop nest (at least one dimension; the last is the
/// inner run).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZipNest {
    rank: usize,
    shape: [usize; MAX_RANK],
    strides: [[isize; MAX_RANK]; 2],
    offsets: [isize; 2],
}

impl ZipNest {
    /// The joint nest of `lhs` and `rhs`, which must have the same shape; `None` above
    /// [`MAX_RANK`] dimensions.
    pub(crate) fn new(lhs: &Layout, rhs: &Layout) -> Option<Self> {
        debug_assert_eq!(lhs.shape(), rhs.shape(), "ZipNest: shapes differ");
        let dims = lhs.num_dims();
        if dims > MAX_RANK {
            return None;
        }
        let mut nest = Self {
            rank: 0,
            shape: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; 2],
            offsets: [lhs.start_offset() as isize, rhs.start_offset() as isize],
        };
        for d in 0..dims {
            nest.push(lhs.shape()[d], [lhs.strides()[d], rhs.strides()[d]]);
        }
        nest.rank = nest.rank.max(1);
        Some(nest)
    }

    /// Appends a dimension inside the current ones, merging it into the innermost one when
    /// stepping that one equals running through the new one for both operands.
    fn push(&mut self, size: usize, strides: [isize; 2]) {
        if size == 1 {
            return;
        }
        if let Some(last) = self.rank.checked_sub(1) {
            let merges = (0..2).all(|k| {
                (size as isize)
                    .checked_mul(strides[k])
                    .is_some_and(|run| self.strides[k][last] == run)
            });
            if merges {
                self.shape[last] *= size;
                self.strides[0][last] = strides[0];
                self.strides[1][last] = strides[1];
                return;
            }
        }
        self.shape[self.rank] = size;
        self.strides[0][self.rank] = strides[0];
        self.strides[1][self.rank] = strides[1];
        self.rank += 1;
    }

    /// Elements in all.
    pub(crate) fn num_elements(&self) -> usize {
        self.shape[..self.rank].iter().product()
    }

    /// The length of the inner run.
    fn inner_len(&self) -> usize {
        self.shape[self.rank - 1]
    }

    /// The operands' strides along the inner run.
    fn inner_strides(&self) -> (isize, isize) {
        (
            self.strides[0][self.rank - 1],
            self.strides[1][self.rank - 1],
        )
    }

    /// Calls `run(lhs_start, rhs_start)` with the storage index of each inner run's first
    /// element, in row-major order of the outer dimensions (nothing for an empty tensor).
    #[inline(always)]
    fn for_each_run(&self, mut run: impl FnMut(isize, isize)) {
        if self.num_elements() == 0 {
            return;
        }
        let outer = self.rank - 1;
        let strides = [&self.strides[0][..outer], &self.strides[1][..outer]];
        odometer(&self.shape[..outer], strides, self.offsets, |[l, r]| {
            run(l, r)
        });
    }

    /// This nest over the indices `range` of its outermost dimension only.
    fn narrowed(&self, range: Range<usize>) -> Self {
        let mut sub = *self;
        sub.shape[0] = range.len();
        for k in 0..2 {
            sub.offsets[k] += range.start as isize * self.strides[k][0];
        }
        sub
    }

    /// Elements per index of the outermost dimension.
    fn outer_step(&self) -> usize {
        self.shape[1..self.rank].iter().product()
    }

    /// `op(lhs, rhs)` for every element, in row-major order; large nests are cut along their
    /// outermost dimension and run in parallel.
    pub(crate) fn map<E: Copy + Sync, R: Send, Op>(&self, lhs: &[E], rhs: &[E], op: Op) -> Vec<R>
    where
        Op: Fn(E, E) -> R + Sync + Send,
    {
        let step = self.outer_step();
        par::collect(
            self.num_elements(),
            step,
            #[inline(always)]
            |start, piece| {
                let rows = start / step.max(1)..(start + piece.len()).div_ceil(step.max(1));
                self.narrowed(rows).map_into(lhs, rhs, &op, piece);
            },
        )
    }

    /// [`map`](Self::map) on this thread, into `out` (exactly as long as the nest). Inlined
    /// into `map`'s pieces, so that its loops take their vector width (`par`'s `widest`).
    #[inline(always)]
    fn map_into<E: Copy, R, Op>(&self, lhs: &[E], rhs: &[E], op: Op, out: &mut [MaybeUninit<R>])
    where
        Op: Fn(E, E) -> R,
    {
        let n = self.inner_len();
        let at = |start: isize| start as usize;
        let mut next = 0;
        let mut take = |count: usize| {
            next += count;
            next - count..next
        };
        match self.inner_strides() {
            (1, 1) => self.for_each_run(|l, r| {
                let (l, r) = (at(l), at(r));
                let pairs = lhs[l..l + n].iter().zip(&rhs[r..r + n]);
                for (d, (&a, &b)) in out[take(n)].iter_mut().zip(pairs) {
                    d.write(op(a, b));
                }
            }),
            (1, 0) => self.for_each_run(|l, r| {
                let (l, b) = (at(l), rhs[at(r)]);
                for (d, &a) in out[take(n)].iter_mut().zip(&lhs[l..l + n]) {
                    d.write(op(a, b));
                }
            }),
            (0, 1) => self.for_each_run(|l, r| {
                let (a, r) = (lhs[at(l)], at(r));
                for (d, &b) in out[take(n)].iter_mut().zip(&rhs[r..r + n]) {
                    d.write(op(a, b));
                }
            }),
            (ls, rs) => self.for_each_run(|l, r| {
                for (i, d) in out[take(n)].iter_mut().enumerate() {
                    let i = i as isize;
                    d.write(op(lhs[at(l + i * ls)], rhs[at(r + i * rs)]));
                }
            }),
        }
        assert_eq!(next, out.len(), "the nest's runs did not fill its output");
    }

    /// `dst = op(dst, rhs)` for every element, where `dst` is the lhs operand's storage and
    /// the lhs layout was dense and row-major from index 0 (so each run is a slice of `dst`);
    /// large nests are cut along their outermost dimension and run in parallel.
    pub(crate) fn assign<E: Copy + Send + Sync, Op>(&self, dst: &mut [E], rhs: &[E], op: Op)
    where
        Op: Fn(E, E) -> E + Sync + Send,
    {
        let step = self.outer_step();
        let len = self.num_elements();
        par::update(
            &mut dst[..len],
            step,
            #[inline(always)]
            |start, piece| {
                let rows = start / step.max(1)..(start + piece.len()).div_ceil(step.max(1));
                let mut sub = self.narrowed(rows);
                sub.offsets[0] -= start as isize;
                sub.assign_here(piece, rhs, &op);
            },
        );
    }

    /// [`assign`](Self::assign) on this thread, inlined as [`map_into`](Self::map_into) is.
    #[inline(always)]
    fn assign_here<E: Copy, Op>(&self, dst: &mut [E], rhs: &[E], op: Op)
    where
        Op: Fn(E, E) -> E,
    {
        let n = self.inner_len();
        let at = |start: isize| start as usize;
        match self.inner_strides() {
            (1, 1) => self.for_each_run(|l, r| {
                let (l, r) = (at(l), at(r));
                for (a, &b) in dst[l..l + n].iter_mut().zip(&rhs[r..r + n]) {
                    *a = op(*a, b);
                }
            }),
            (1, 0) => self.for_each_run(|l, r| {
                let (l, b) = (at(l), rhs[at(r)]);
                for a in &mut dst[l..l + n] {
                    *a = op(*a, b);
                }
            }),
            (ls, rs) => self.for_each_run(|l, r| {
                for i in 0..n as isize {
                    let a = &mut dst[at(l + i * ls)];
                    *a = op(*a, rhs[at(r + i * rs)]);
                }
            }),
        }
    }
}

/// Calls `visit` with the storage index of each operand at every index of `shape`, in
/// row-major order (once, at `start`, for no dimensions). `shape` has at most [`MAX_RANK`]
/// dimensions and none of size 0.
#[inline]
fn odometer<const K: usize>(
    shape: &[usize],
    strides: [&[isize]; K],
    start: [isize; K],
    mut visit: impl FnMut([isize; K]),
) {
    let mut index = [0usize; MAX_RANK];
    let mut at = start;
    loop {
        visit(at);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            for k in 0..K {
                at[k] += strides[k][d];
            }
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
            for k in 0..K {
                at[k] -= strides[k][d] * shape[d] as isize;
            }
        }
    }
}

/// Writes a strided layout into `dst` (exactly as long) in row-major order: one slice copy per
/// run when the inner stride is 1, else one tiled copy (`copy_2d_tiled`) per block of the two
/// inner dimensions, so that a transposed batch (attention's keys, `[b, t, h·d]` read with
/// strides `[h·d·t, 1, t]`) moves in cache-sized tiles instead of an element at a time.
/// `shape` and `strides` are collapsed as `collapse_for_copy` leaves them: 1 to [`MAX_RANK`]
/// dimensions, positive strides.
pub(crate) fn copy_block<E: Copy>(
    dst: &mut [E],
    src: &[E],
    offset: isize,
    shape: &[usize],
    strides: &[isize],
) {
    if shape.contains(&0) {
        return;
    }
    let rank = shape.len();
    let inner = shape[rank - 1];
    if strides[rank - 1] == 1 {
        let mut at = 0;
        odometer(
            &shape[..rank - 1],
            [&strides[..rank - 1]],
            [offset],
            |[s]| {
                let s = s as usize;
                dst[at..at + inner].copy_from_slice(&src[s..s + inner]);
                at += inner;
            },
        );
    } else if rank == 1 {
        for (i, slot) in dst.iter_mut().enumerate() {
            *slot = src[(offset + i as isize * strides[0]) as usize];
        }
    } else {
        let (rows, cols) = (shape[rank - 2], inner);
        let (row_stride, col_stride) = (strides[rank - 2], strides[rank - 1]);
        let mut blocks = dst.chunks_exact_mut(rows * cols);
        odometer(
            &shape[..rank - 2],
            [&strides[..rank - 2]],
            [offset],
            |[s]| {
                let block = blocks
                    .next()
                    .expect("copy_block: dst shorter than the layout");
                crate::tensor::copy_2d_tiled(block, src, s, rows, cols, row_stride, col_stride);
            },
        );
    }
}

#[cfg(test)]
mod tests {
    //! The nest against the unpatched path: every result equals, bitwise, the element-by-element
    //! walk of `StridedIter` that binary ops and `to_contiguous` fell back to before.

    use alloc::vec;
    use alloc::vec::Vec;

    use burn_backend::TensorData;
    use burn_std::{Bytes, Shape};

    use crate::FlexTensor;
    use crate::ops::binary::{BinaryOp, binary_op};
    use crate::ops::expand::{broadcast_binary, expand};
    use crate::ops::flip::flip;
    use crate::strided_index::StridedIter;

    fn tensor(shape: &[usize], seed: f32) -> FlexTensor {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| seed + 0.37 * i as f32).collect();
        FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
    }

    fn values<E: burn_backend::Element + bytemuck::Pod>(t: &FlexTensor) -> Vec<E> {
        let storage: &[E] = t.storage();
        StridedIter::new(t.layout()).map(|i| storage[i]).collect()
    }

    /// A tensor with `t`'s layout over a buffer of its own (so ops may write into it).
    fn own(t: &FlexTensor) -> FlexTensor {
        let storage = t.storage::<f32>().to_vec();
        FlexTensor::new(Bytes::from_elems(storage), t.layout().clone(), t.dtype())
    }

    /// The unpatched general path: both operands walked element by element.
    fn reference(lhs: &FlexTensor, rhs: &FlexTensor, op: fn(f32, f32) -> f32) -> Vec<f32> {
        let (l, r) = broadcast_binary(lhs.clone(), rhs.clone());
        values::<f32>(&l)
            .into_iter()
            .zip(values::<f32>(&r))
            .map(|(a, b)| op(a, b))
            .collect()
    }

    /// Pairs of operands whose layouts miss burn-flex's contiguous and 2-D fast paths.
    fn pairs() -> Vec<(&'static str, FlexTensor, FlexTensor)> {
        let nchw = [4, 3, 5, 6];
        let per_channel = || tensor(&[1, 3, 1, 1], 0.5);
        let channels_last = || tensor(&[4, 5, 6, 3], 1.0).permute(&[0, 3, 1, 2]);
        vec![
            ("x * g[1,C,1,1]", tensor(&nchw, 1.0), per_channel()),
            ("g[1,C,1,1] * x", per_channel(), tensor(&nchw, 1.0)),
            ("permuted x * g", channels_last(), per_channel()),
            ("x * permuted x", tensor(&nchw, 2.0), channels_last()),
            (
                "flipped x * g",
                flip(tensor(&nchw, 1.0), &[1, 3]),
                per_channel(),
            ),
            (
                "narrowed x * row",
                tensor(&[4, 3, 5, 9], 1.0).narrow(3, 2, 6),
                tensor(&[6], 0.25),
            ),
            (
                "expanded both ways",
                tensor(&[4, 1, 5], 1.0),
                tensor(&[1, 3, 1], 2.0),
            ),
            (
                "rank 6",
                tensor(&[2, 1, 3, 2, 1, 4], 1.0),
                tensor(&[2, 4, 1, 1, 1, 3], 3.0).permute(&[0, 2, 5, 3, 4, 1]),
            ),
            (
                "a size-0 dim",
                tensor(&[2, 0, 3], 1.0),
                tensor(&[1, 0, 1], 1.0),
            ),
            (
                "one element",
                tensor(&[1, 1, 1], 4.0),
                expand(tensor(&[1], 2.0), Shape::from(vec![1, 1, 1])),
            ),
        ]
    }

    #[test]
    fn binary_ops_equal_the_strided_walk() {
        let ops: [(BinaryOp, fn(f32, f32) -> f32, fn(f64, f64) -> f64); 4] = [
            (BinaryOp::Add, |a, b| a + b, |a, b| a + b),
            (BinaryOp::Sub, |a, b| a - b, |a, b| a - b),
            (BinaryOp::Mul, |a, b| a * b, |a, b| a * b),
            (BinaryOp::Div, |a, b| a / b, |a, b| a / b),
        ];
        for (name, lhs, rhs) in pairs() {
            for (hint, f32_op, f64_op) in ops {
                let expected = reference(&lhs, &rhs, f32_op);
                for simd_hint in [Some(hint), None] {
                    // A unique lhs (written in place when dense), then a shared one, which
                    // must be left as it was.
                    let unique = binary_op(own(&lhs), rhs.clone(), f32_op, f64_op, simd_hint);
                    assert_eq!(values::<f32>(&unique), expected, "{name}, unique lhs");
                    let before = values::<f32>(&lhs);
                    let shared = binary_op(lhs.clone(), rhs.clone(), f32_op, f64_op, simd_hint);
                    assert_eq!(values::<f32>(&shared), expected, "{name}, shared lhs");
                    assert_eq!(
                        values::<f32>(&lhs),
                        before,
                        "{name}: the shared lhs changed"
                    );
                }
            }
        }
    }

    #[test]
    fn to_contiguous_equals_the_strided_walk() {
        let cases = [
            // BatchNorm's `swap_dims(0, 1)` before its reshape to [C, N*H*W].
            tensor(&[4, 3, 5, 6], 1.0).permute(&[1, 0, 2, 3]),
            tensor(&[2, 4, 3, 3, 2], 1.0).permute(&[0, 2, 1, 3, 4]),
            tensor(&[3, 4, 9], 1.0).narrow(2, 1, 7).narrow(0, 1, 2),
            tensor(&[2, 3, 4, 5], 1.0).permute(&[2, 0, 3, 1]),
            flip(tensor(&[3, 4, 5], 1.0), &[1]),
            tensor(&[3, 0, 5], 1.0).permute(&[1, 0, 2]),
            // A strided run, and rank 9 (above the nest's).
            tensor(&[7, 3], 1.0).narrow(1, 1, 1),
            tensor(&[2, 1, 2, 2, 1, 2, 2, 1, 3], 1.0).permute(&[8, 7, 6, 5, 4, 3, 2, 1, 0]),
            // Large enough to be cut into pieces on rayon's threads: attention's keys back
            // from `[b, h, d, t]` (tiled blocks), a transposed weight, a narrowed matrix (runs).
            tensor(&[8, 4, 64, 130], 1.0).permute(&[0, 3, 1, 2]),
            tensor(&[300, 1000], 1.0).permute(&[1, 0]),
            tensor(&[600, 500], 1.0).narrow(1, 3, 450),
        ];
        for t in cases {
            let copy = t.to_contiguous();
            assert!(copy.is_contiguous());
            assert_eq!(copy.layout().shape(), t.layout().shape());
            assert_eq!(copy.storage::<f32>(), values::<f32>(&t).as_slice());
        }
    }
}
