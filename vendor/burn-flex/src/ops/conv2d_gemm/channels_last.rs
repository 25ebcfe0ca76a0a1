//! A batch item's planes turned channels-last (`[channels, plane]` written as
//! `[plane, channels]`), the copy every 2-D convolution of [`conv2d_gemm`](super) starts with.

/// Side of the square blocks [`to_channels_last`] moves one at a time.
const BLOCK: usize = 16;

/// How a full block of 4-byte values is moved: through the widest registers the CPU has, or
/// one value at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mover {
    /// 256 loads and stores a block; every CPU, every element size.
    Scalar,
    /// Four 8 × 8 transposes in AVX registers: 32 loads, 96 shuffles and 32 stores a block.
    Avx,
    /// One 16 × 16 transpose in AVX-512 registers: 16 loads, 64 shuffles and 16 stores.
    Avx512,
}

impl Mover {
    /// The widest mover this CPU runs for values of `T`.
    pub(super) fn best<T>() -> Self {
        let wide = [Self::Avx512, Self::Avx]
            .into_iter()
            .find(|m| m.available());
        match wide {
            Some(mover) if size_of::<T>() == 4 => mover,
            _ => Self::Scalar,
        }
    }

    /// Whether this CPU runs `self`.
    pub(super) fn available(self) -> bool {
        match self {
            Self::Scalar => true,
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            Self::Avx => std::is_x86_feature_detected!("avx"),
            #[cfg(all(target_arch = "x86_64", feature = "std"))]
            Self::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
            _ => false,
        }
    }
}

/// Writes `[channels, plane]` as `[plane, channels]`, in square blocks so that the rows read
/// and the rows written stay in cache while a block is moved (a channel at a time, the strided
/// writes touched a new cache line per element). Full blocks of 4-byte values move through
/// vector registers where the CPU has AVX or AVX-512; bits are moved, never computed.
pub(super) fn to_channels_last<T: Copy>(x: &[T], channels: usize, plane: usize, out: &mut [T]) {
    to_channels_last_by(Mover::best::<T>(), x, channels, plane, out);
}

/// [`to_channels_last`] with the given mover for full blocks (one this CPU runs, for values
/// of 4 bytes unless `Scalar`).
pub(super) fn to_channels_last_by<T: Copy>(
    mover: Mover,
    x: &[T],
    channels: usize,
    plane: usize,
    out: &mut [T],
) {
    assert!(x.len() >= channels * plane && out.len() >= channels * plane);
    assert!(mover == Mover::Scalar || size_of::<T>() == 4);
    for c0 in (0..channels).step_by(BLOCK) {
        let cs = c0..(c0 + BLOCK).min(channels);
        for p0 in (0..plane).step_by(BLOCK) {
            let full = cs.len() == BLOCK && p0 + BLOCK <= plane;
            if full && mover != Mover::Scalar {
                let src = x[c0 * plane + p0..].as_ptr().cast::<f32>();
                let dst = out[p0 * channels + c0..].as_mut_ptr().cast::<f32>();
                // SAFETY: the block's 16 rows of 16 values lie inside `x` (rows c0..c0 + 16
                // from column p0 + 16 ≤ plane) and inside `out` (rows p0..p0 + 16 from column
                // c0 + 16 ≤ channels), as the assertion above and the loop bounds give; `T` is
                // 4 bytes of plain data (asserted), moved as such; the caller picked a mover
                // this CPU runs.
                unsafe { move_block(mover, src, plane, dst, channels) };
                continue;
            }
            for p in p0..(p0 + BLOCK).min(plane) {
                let to = &mut out[p * channels..][cs.clone()];
                for (slot, c) in to.iter_mut().zip(cs.clone()) {
                    *slot = x[c * plane + p];
                }
            }
        }
    }
}

/// Moves a full block with `mover`.
///
/// # Safety
/// As [`transpose_16x16_avx512`]'s, for a CPU that runs `mover` (not `Scalar`).
unsafe fn move_block(
    mover: Mover,
    src: *const f32,
    src_stride: usize,
    dst: *mut f32,
    dst_stride: usize,
) {
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    match mover {
        // SAFETY: the caller's contract.
        Mover::Avx512 => unsafe { transpose_16x16_avx512(src, src_stride, dst, dst_stride) },
        Mover::Avx => {
            for (r, c) in [(0, 0), (0, 8), (8, 0), (8, 8)] {
                // SAFETY: each quarter of the block lies inside it (the caller's contract).
                unsafe {
                    transpose_8x8_avx(
                        src.add(r * src_stride + c),
                        src_stride,
                        dst.add(c * dst_stride + r),
                        dst_stride,
                    )
                }
            }
        }
        Mover::Scalar => unreachable!("full blocks move in registers only"),
    }
    #[cfg(not(all(target_arch = "x86_64", feature = "std")))]
    unreachable!("{mover:?} on a CPU without it ({src:?}, {src_stride}, {dst:?}, {dst_stride})")
}

/// Moves a 16 × 16 block of 4-byte values: row `r` of `src` (16 values from
/// `src + r · src_stride`) becomes column `r` of `dst` (`dst + c · dst_stride + r`). Pairs of
/// rows are interleaved by 32 then 64 bits, which leaves, in each 128-bit lane, four rows of
/// one column; two rounds of lane shuffles then gather a column's four lanes.
///
/// # Safety
/// The CPU must have AVX-512F, and both blocks must lie inside their buffers.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_16x16_avx512(
    src: *const f32,
    src_stride: usize,
    dst: *mut f32,
    dst_stride: usize,
) {
    use core::arch::x86_64::*;
    let mut rows = [_mm512_setzero_ps(); 16];
    for (r, row) in rows.iter_mut().enumerate() {
        // SAFETY: row `r` of the block is inside `src`'s buffer (the caller's contract).
        *row = unsafe { _mm512_loadu_ps(src.add(r * src_stride)) };
    }
    // Lane k of `pairs[2i]`: rows 2i, 2i + 1 at columns 4k, 4k + 1; of `pairs[2i + 1]`: at
    // 4k + 2, 4k + 3.
    let mut pairs = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        pairs[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
        pairs[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
    }
    // Lane k of `quads[4g + j]`: rows 4g..4g + 4 at column 4k + j.
    let mut quads = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let d = |i: usize| _mm512_castps_pd(pairs[4 * g + i]);
        let lo = |a, b| _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        let hi = |a, b| _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        quads[4 * g] = lo(d(0), d(2));
        quads[4 * g + 1] = hi(d(0), d(2));
        quads[4 * g + 2] = lo(d(1), d(3));
        quads[4 * g + 3] = hi(d(1), d(3));
    }
    // Column 4k + j: lane g from lane k of quads[4g + j].
    for j in 0..4 {
        let v = |g: usize| quads[4 * g + j];
        let low01 = _mm512_shuffle_f32x4::<0x44>(v(0), v(1));
        let high01 = _mm512_shuffle_f32x4::<0xEE>(v(0), v(1));
        let low23 = _mm512_shuffle_f32x4::<0x44>(v(2), v(3));
        let high23 = _mm512_shuffle_f32x4::<0xEE>(v(2), v(3));
        let columns = [
            _mm512_shuffle_f32x4::<0x88>(low01, low23),
            _mm512_shuffle_f32x4::<0xDD>(low01, low23),
            _mm512_shuffle_f32x4::<0x88>(high01, high23),
            _mm512_shuffle_f32x4::<0xDD>(high01, high23),
        ];
        for (k, column) in columns.into_iter().enumerate() {
            // SAFETY: row 4k + j of the destination block is inside `dst`'s buffer.
            unsafe { _mm512_storeu_ps(dst.add((4 * k + j) * dst_stride), column) };
        }
    }
}

/// Moves an 8 × 8 block of 4-byte values: row `r` of `src` (8 values from
/// `src + r · src_stride`) becomes column `r` of `dst` (`dst + c · dst_stride + r`). Pairs of
/// rows are interleaved by 32 bits, pairs of those by 64 bits, which leaves in each 128-bit half
/// four rows of one column; the halves of rows 0–3 and 4–7 are then joined.
///
/// # Safety
/// The CPU must have AVX, and both blocks must lie inside their buffers.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
#[target_feature(enable = "avx")]
unsafe fn transpose_8x8_avx(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
    use core::arch::x86_64::*;
    let mut rows = [_mm256_setzero_ps(); 8];
    for (r, row) in rows.iter_mut().enumerate() {
        // SAFETY: row `r` of the block is inside `src`'s buffer (the caller's contract).
        *row = unsafe { _mm256_loadu_ps(src.add(r * src_stride)) };
    }
    // Half h of `pairs[2i]`: rows 2i, 2i + 1 at columns 4h, 4h + 1; of `pairs[2i + 1]`: at
    // 4h + 2, 4h + 3.
    let mut pairs = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        pairs[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
        pairs[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
    }
    // Half h of `quads[4g + j]`: rows 4g..4g + 4 at column 4h + j.
    let mut quads = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let p = |i: usize| pairs[4 * g + i];
        quads[4 * g] = _mm256_shuffle_ps::<0x44>(p(0), p(2));
        quads[4 * g + 1] = _mm256_shuffle_ps::<0xEE>(p(0), p(2));
        quads[4 * g + 2] = _mm256_shuffle_ps::<0x44>(p(1), p(3));
        quads[4 * g + 3] = _mm256_shuffle_ps::<0xEE>(p(1), p(3));
    }
    // Column 4h + j: rows 0–3 from half h of quads[j], rows 4–7 from half h of quads[4 + j].
    for j in 0..4 {
        let low = _mm256_permute2f128_ps::<0x20>(quads[j], quads[4 + j]);
        let high = _mm256_permute2f128_ps::<0x31>(quads[j], quads[4 + j]);
        // SAFETY: rows j and 4 + j of the destination block are inside `dst`'s buffer.
        unsafe {
            _mm256_storeu_ps(dst.add(j * dst_stride), low);
            _mm256_storeu_ps(dst.add((4 + j) * dst_stride), high);
        }
    }
}
