//! The convolution, its weight gradient and (through the backend) its input gradient against
//! their defining sums in f64, over geometries that reach every path.

use super::*;
use burn_backend::TensorData;

/// Values in [-1, 1) from a seed (a linear congruential sequence).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64) -> FlexTensor {
    let n = shape.iter().product();
    FlexTensor::from_data(TensorData::new(values(n, seed), shape.to_vec()))
}

fn data(t: FlexTensor) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

/// The input of `x` under output position (oy, ox) and kernel position (ky, kx) of
/// channel c, or None in the padding.
fn input_at(
    geo: &Geometry,
    x: &[f32],
    b: usize,
    c: usize,
    [oy, ox, ky, kx]: [usize; 4],
) -> Option<f64> {
    let iy = (oy * geo.stride[0] + ky * geo.dilation[0]).checked_sub(geo.padding[0])?;
    let ix = (ox * geo.stride[1] + kx * geo.dilation[1]).checked_sub(geo.padding[1])?;
    (iy < geo.in_h && ix < geo.in_w)
        .then(|| x[((b * geo.c_in + c) * geo.in_h + iy) * geo.in_w + ix] as f64)
}

/// The convolution and its weight gradient by their defining sums, in f64.
fn reference(geo: &Geometry, x: &[f32], w: &[f32], dy: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (cpg, opg) = (geo.in_per_group(), geo.out_per_group());
    let mut y = vec![0.0; geo.batch * geo.c_out * geo.positions()];
    let mut dw = vec![0.0; geo.c_out * cpg * geo.k_h * geo.k_w];
    for b in 0..geo.batch {
        for o in 0..geo.c_out {
            for (oy, ox) in (0..geo.out_h).flat_map(|oy| (0..geo.out_w).map(move |ox| (oy, ox))) {
                let out = ((b * geo.c_out + o) * geo.out_h + oy) * geo.out_w + ox;
                for c in 0..cpg {
                    for (ky, kx) in (0..geo.k_h).flat_map(|ky| (0..geo.k_w).map(move |kx| (ky, kx)))
                    {
                        let channel = (o / opg) * cpg + c;
                        let Some(v) = input_at(geo, x, b, channel, [oy, ox, ky, kx]) else {
                            continue;
                        };
                        let wi = ((o * cpg + c) * geo.k_h + ky) * geo.k_w + kx;
                        y[out] += v * w[wi] as f64;
                        dw[wi] += v * dy[out] as f64;
                    }
                }
            }
        }
    }
    (y, dw)
}

fn close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

/// (batch, c_in, h, w, c_out, k_h, k_w, stride, padding, dilation, groups)
const CASES: [(
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    [usize; 2],
    [usize; 2],
    [usize; 2],
    usize,
); 12] = [
    (2, 3, 8, 8, 4, 3, 3, [1, 1], [1, 1], [1, 1], 1),
    // Stride 1 dilated and grouped; over several row tiles (fewer than 8 channels: one GEMM
    // per tile over the unfolded kernel positions).
    (2, 4, 9, 8, 6, 3, 3, [1, 1], [2, 1], [2, 1], 2),
    (2, 3, 24, 20, 5, 3, 3, [1, 1], [1, 1], [1, 1], 1),
    (3, 4, 9, 7, 6, 3, 3, [2, 2], [1, 1], [1, 1], 1),
    (17, 2, 5, 5, 3, 1, 1, [2, 2], [0, 0], [1, 1], 1),
    (2, 4, 7, 9, 4, 3, 2, [1, 2], [2, 0], [2, 1], 2),
    (1, 6, 6, 6, 6, 3, 3, [1, 1], [1, 1], [1, 1], 6),
    (33, 3, 4, 4, 5, 2, 2, [1, 1], [0, 1], [1, 1], 1),
    (2, 2, 40, 3, 3, 3, 3, [1, 1], [1, 1], [1, 1], 1),
    (4, 5, 3, 3, 2, 5, 5, [1, 1], [2, 2], [1, 1], 1),
    // Stride 1 with groups of 8 or more channels both ways (a GEMM per kernel position).
    (2, 16, 24, 20, 8, 3, 3, [1, 1], [1, 1], [1, 1], 1),
    (2, 16, 9, 8, 16, 3, 3, [1, 1], [2, 1], [2, 1], 2),
];

#[test]
fn channels_last_moves_every_value_once() {
    use channels_last::{Mover, to_channels_last_by};
    let movers = [Mover::Scalar, Mover::Avx, Mover::Avx512];
    for mover in movers.into_iter().filter(|m| m.available()) {
        for (channels, plane) in [(3, 1024), (32, 1024), (64, 256), (17, 35), (1, 5), (48, 40)] {
            let x = values(channels * plane, 3);
            let mut out = vec![0.0; x.len()];
            to_channels_last_by(mover, &x, channels, plane, &mut out);
            for c in 0..channels {
                for p in 0..plane {
                    assert_eq!(
                        out[p * channels + c],
                        x[c * plane + p],
                        "{mover:?} {channels}x{plane}"
                    );
                }
            }
        }
    }
}

#[test]
fn forward_and_weight_gradient_equal_the_defining_sums() {
    for (i, &(n, ci, h, w, co, kh, kw, stride, padding, dilation, groups)) in
        CASES.iter().enumerate()
    {
        let options = ConvOptions::new(stride, padding, dilation, groups);
        let (x, weight) = (
            tensor(&[n, ci, h, w], i as u64),
            tensor(&[co, ci / groups, kh, kw], 100 + i as u64),
        );
        let geo = Geometry::new(&[n, ci, h, w], &[co, ci / groups, kh, kw], &options);
        let dy = tensor(&[n, co, geo.out_h, geo.out_w], 200 + i as u64);
        let (y, dw) = reference(
            &geo,
            &data(x.clone()),
            &data(weight.clone()),
            &data(dy.clone()),
        );
        let got = conv2d(x.clone(), weight, None, &options, DType::F32, [0.0f32, 1.0]);
        close(&data(got), &y, &format!("case {i}: output"));
        let shape = [co, ci / groups, kh, kw];
        let got = conv2d_weight_grad(x, dy, &shape, &options, DType::F32, [0.0f32, 1.0]);
        close(&data(got), &dw, &format!("case {i}: weight gradient"));
    }
}

/// The input gradient by its defining sum, in f64: every output gradient times every
/// weight, added at the input position that weight read.
fn input_gradient(geo: &Geometry, w: &[f32], dy: &[f32]) -> Vec<f64> {
    let mut dx = vec![0.0f64; geo.batch * geo.c_in * geo.in_plane()];
    let (cpg, opg) = (geo.in_per_group(), geo.out_per_group());
    for b in 0..geo.batch {
        for o in 0..geo.c_out {
            for c in (o / opg) * cpg..(o / opg + 1) * cpg {
                let kernel = (0..geo.k_h).flat_map(|ky| (0..geo.k_w).map(move |kx| (ky, kx)));
                for (ky, kx) in kernel {
                    for (oy, ox) in
                        (0..geo.out_h).flat_map(|oy| (0..geo.out_w).map(move |ox| (oy, ox)))
                    {
                        let iy = (oy * geo.stride[0] + ky * geo.dilation[0])
                            .wrapping_sub(geo.padding[0]);
                        let ix = (ox * geo.stride[1] + kx * geo.dilation[1])
                            .wrapping_sub(geo.padding[1]);
                        if iy < geo.in_h && ix < geo.in_w {
                            let at = ((b * geo.c_out + o) * geo.out_h + oy) * geo.out_w + ox;
                            let k = w[((o * cpg + c % cpg) * geo.k_h + ky) * geo.k_w + kx];
                            dx[((b * geo.c_in + c) * geo.in_h + iy) * geo.in_w + ix] +=
                                dy[at] as f64 * k as f64;
                        }
                    }
                }
            }
        }
    }
    dx
}

#[test]
fn the_input_gradient_equals_its_defining_sum() {
    use crate::Flex;
    use burn_backend::ops::ModuleOps;
    for (i, &(n, ci, h, w, co, kh, kw, stride, padding, dilation, groups)) in
        CASES.iter().enumerate()
    {
        let options = ConvOptions::new(stride, padding, dilation, groups);
        let (x, weight) = (
            tensor(&[n, ci, h, w], i as u64),
            tensor(&[co, ci / groups, kh, kw], 100 + i as u64),
        );
        let geo = Geometry::new(&[n, ci, h, w], &[co, ci / groups, kh, kw], &options);
        let dy = tensor(&[n, co, geo.out_h, geo.out_w], 200 + i as u64);
        let want = input_gradient(&geo, &data(weight.clone()), &data(dy.clone()));
        let got = Flex::conv2d_x_backward(x, weight, dy, options);
        close(&data(got), &want, &format!("case {i}: input gradient"));
    }
}

#[test]
fn a_bias_is_added_per_output_channel() {
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let (x, w) = (tensor(&[2, 3, 5, 5], 1), tensor(&[4, 3, 3, 3], 2));
    let bias = FlexTensor::from_data(TensorData::new(vec![1.0f32, -2.0, 0.5, 3.0], [4]));
    let plain = data(conv2d(
        x.clone(),
        w.clone(),
        None,
        &options,
        DType::F32,
        [0.0f32, 1.0],
    ));
    let biased = data(conv2d(
        x,
        w,
        Some(bias),
        &options,
        DType::F32,
        [0.0f32, 1.0],
    ));
    for (i, (p, b)) in plain.iter().zip(&biased).enumerate() {
        assert_eq!(*b, *p + [1.0, -2.0, 0.5, 3.0][(i / 25) % 4]);
    }
}

#[test]
fn the_weight_gradient_does_not_depend_on_the_thread_count() {
    // 8 input channels go through conv2d_gemm, 3 through conv2d_shifted.
    for c_in in [8, 3] {
        weight_gradient_on_threads_1_2_3_8(c_in);
    }
}

fn weight_gradient_on_threads_1_2_3_8(c_in: usize) {
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let (x, dy) = (tensor(&[37, c_in, 12, 12], 3), tensor(&[37, 16, 12, 12], 4));
    let grad = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            data(conv2d_weight_grad(
                x.clone(),
                dy.clone(),
                &[16, c_in, 3, 3],
                &options,
                DType::F32,
                [0.0f32, 1.0],
            ))
        })
    };
    let one = grad(1);
    for threads in [2, 3, 8] {
        assert!(
            grad(threads)
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

#[test]
fn the_output_is_the_unpatched_convolution_within_rounding() {
    for (i, &(n, ci, h, w, co, kh, kw, stride, padding, dilation, groups)) in
        CASES.iter().enumerate()
    {
        let options = ConvOptions::new(stride, padding, dilation, groups);
        let (x, weight) = (
            tensor(&[n, ci, h, w], i as u64),
            tensor(&[co, ci / groups, kh, kw], 9 + i as u64),
        );
        let old = data(crate::ops::conv::conv2d_f32(
            x.clone(),
            weight.clone(),
            None,
            &options,
        ));
        let new = data(conv2d(x, weight, None, &options, DType::F32, [0.0f32, 1.0]));
        let old: Vec<f64> = old.into_iter().map(f64::from).collect();
        close(&new, &old, &format!("case {i}"));
    }
}
