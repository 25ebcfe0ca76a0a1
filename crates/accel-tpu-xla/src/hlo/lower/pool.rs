//! 2-D pooling and its gradients: `reduce_window` forward; average pooling's gradient as the
//! input gradient of a depthwise convolution with a ones kernel; max pooling's by scattering
//! into the recorded indices; adaptive average pooling as products with averaging matrices.

use burn_backend::DType;
use burn_backend::tensor::IndexingUpdateOp;

use crate::hlo::func::{Function, Val};
use crate::hlo::lower::base::scatter;
use crate::hlo::lower::conv::{self, Window};
use crate::hlo::lower::elementwise::batched_matmul;
use crate::hlo::lower::numeric::arg_body;

/// A pooling window over the last two dims.
pub struct Pool {
    /// Kernel size.
    pub kernel: [usize; 2],
    /// Step.
    pub stride: [usize; 2],
    /// Padding on both sides (ceil mode pads more on the high side, as the output shape says).
    pub padding: [usize; 2],
    /// Spacing of the taps.
    pub dilation: [usize; 2],
}

impl Pool {
    /// `[lo, hi]` padding per dim of a 4-D input reaching the output size `out`.
    fn pads(&self, input: &[usize], out: &[usize]) -> Vec<(i64, i64)> {
        let mut pads = vec![(0, 0), (0, 0)];
        for d in 0..2 {
            let lo = self.padding[d] as i64;
            let span = ((self.kernel[d] - 1) * self.dilation[d]) as i64;
            let hi = (out[2 + d] as i64 - 1) * self.stride[d] as i64 + span + 1
                - input[2 + d] as i64
                - lo;
            pads.push((lo, hi));
        }
        pads
    }

    fn attrs(&self, input: &[usize], out: &[usize]) -> String {
        let pads: Vec<String> = self
            .pads(input, out)
            .iter()
            .map(|(l, h)| format!("[{l}, {h}]"))
            .collect();
        format!(
            "window_dimensions = array<i64: 1, 1, {}, {}>, window_strides = array<i64: 1, 1, {}, {}>, window_dilations = array<i64: 1, 1, {}, {}>, padding = dense<[{}]> : tensor<4x2xi64>",
            self.kernel[0],
            self.kernel[1],
            self.stride[0],
            self.stride[1],
            self.dilation[0],
            self.dilation[1],
            pads.join(", ")
        )
    }
}

/// Max pooling.
pub fn max(f: &mut Function, x: &Val, p: &Pool, out: &[usize]) -> Val {
    let init = f.constant(f64::NEG_INFINITY, x.dtype, &[]);
    let body = f.scalar_body("stablehlo.maximum", x.dtype);
    let attrs = p.attrs(&x.shape, out);
    f.op_multi(
        "stablehlo.reduce_window",
        &[x, &init],
        &body,
        &attrs,
        &[(out.to_vec(), x.dtype)],
    )
    .remove(0)
}

/// Max pooling with the flat index (`h * width + w`) of each maximum; ties go to the first, NaN
/// wins.
pub fn max_with_indices(
    f: &mut Function,
    x: &Val,
    p: &Pool,
    out: &[usize],
    index: DType,
) -> (Val, Val) {
    let w = x.shape[3];
    let rows = f.iota(&x.shape, 2, index);
    let width = f.constant(w as f64, index, &x.shape);
    let rows = f.binary("stablehlo.multiply", &rows, &width);
    let cols = f.iota(&x.shape, 3, index);
    let flat = f.binary("stablehlo.add", &rows, &cols);
    let init_v = f.constant(f64::NEG_INFINITY, x.dtype, &[]);
    let init_i = f.constant(0.0, index, &[]);
    let body = arg_body(f, "GT", x.dtype, index);
    let attrs = p.attrs(&x.shape, out);
    let mut outs = f.op_multi(
        "stablehlo.reduce_window",
        &[x, &flat, &init_v, &init_i],
        &body,
        &attrs,
        &[(out.to_vec(), x.dtype), (out.to_vec(), index)],
    );
    let indices = outs.pop().expect("two results");
    (outs.pop().expect("two results"), indices)
}

/// Max pooling's gradient: `grad` added at the input positions `indices` recorded.
pub fn max_backward(f: &mut Function, x_shape: &[usize], grad: &Val, indices: &Val) -> Val {
    let (b, c) = (x_shape[0], x_shape[1]);
    let plane = x_shape[2] * x_shape[3];
    let windows = grad.shape[2] * grad.shape[3];
    let zeros = f.constant(0.0, grad.dtype, &[b, c, plane]);
    let idx = f.reshape(indices, &[b, c, windows]);
    let g = f.reshape(grad, &[b, c, windows]);
    let v = scatter(f, &zeros, 2, &idx, &g, IndexingUpdateOp::Add);
    f.reshape(&v, x_shape)
}

/// How many inputs each window averages: with `include_pad` the padding counts, the extra
/// ceil-mode padding never does.
fn counts(f: &mut Function, x: &Val, p: &Pool, out: &[usize], include_pad: bool) -> Val {
    let (h, w) = (x.shape[2], x.shape[3]);
    let (ones_shape, pool) = if include_pad {
        let shape = vec![1, 1, h + 2 * p.padding[0], w + 2 * p.padding[1]];
        let unpadded = Pool {
            padding: [0, 0],
            ..*p
        };
        (shape, unpadded)
    } else {
        (vec![1, 1, h, w], Pool { ..*p })
    };
    let ones = f.constant(1.0, x.dtype, &ones_shape);
    let init = f.constant(0.0, x.dtype, &[]);
    let body = f.scalar_body("stablehlo.add", x.dtype);
    let out1 = vec![1, 1, out[2], out[3]];
    let attrs = pool.attrs(&ones_shape, &out1);
    let c = f
        .op_multi(
            "stablehlo.reduce_window",
            &[&ones, &init],
            &body,
            &attrs,
            &[(out1, x.dtype)],
        )
        .remove(0);
    f.broadcast_to(&c, out)
}

/// Average pooling.
pub fn avg(f: &mut Function, x: &Val, p: &Pool, out: &[usize], include_pad: bool) -> Val {
    let init = f.constant(0.0, x.dtype, &[]);
    let body = f.scalar_body("stablehlo.add", x.dtype);
    let attrs = p.attrs(&x.shape, out);
    let sum = f
        .op_multi(
            "stablehlo.reduce_window",
            &[x, &init],
            &body,
            &attrs,
            &[(out.to_vec(), x.dtype)],
        )
        .remove(0);
    let n = counts(f, x, p, out, include_pad);
    f.binary("stablehlo.divide", &sum, &n)
}

/// Average pooling's gradient.
pub fn avg_backward(f: &mut Function, x: &Val, grad: &Val, p: &Pool, include_pad: bool) -> Val {
    let n = counts(f, x, p, &grad.shape, include_pad);
    let g = f.binary("stablehlo.divide", grad, &n);
    let c = x.shape[1];
    let ones = f.constant(1.0, x.dtype, &[c, 1, p.kernel[0], p.kernel[1]]);
    let window = Window {
        stride: p.stride.to_vec(),
        padding: p.padding.to_vec(),
        dilation: vec![1, 1],
        groups: c,
    };
    conv::x_backward(f, &x.shape, &ones, &g, &window)
}

/// The [out, len] matrix averaging the adaptive pooling bins of one dim.
fn bins(f: &mut Function, len: usize, out: usize, dtype: DType) -> Val {
    let mut m = vec![0.0; out * len];
    for i in 0..out {
        let start = i * len / out;
        let end = ((i + 1) * len).div_ceil(out);
        for j in start..end {
            m[i * len + j] = 1.0 / (end - start) as f64;
        }
    }
    f.dense(&m, &[out, len], dtype)
}

/// Adaptive average pooling: `A_h @ x @ A_wᵀ` with the bins' averaging matrices.
pub fn adaptive_avg(f: &mut Function, x: &Val, out: &[usize]) -> Val {
    let a_h = bins(f, x.shape[2], out[2], x.dtype);
    let a_w = bins(f, x.shape[3], out[3], x.dtype);
    let a_wt = f.transpose(&a_w, &[1, 0]);
    let rows = vec![x.shape[0], x.shape[1], out[2], x.shape[3]];
    let t = batched_matmul(f, &a_h, x, &rows, x.dtype);
    batched_matmul(f, &t, &a_wt, out, x.dtype)
}

/// Adaptive average pooling's gradient: `A_hᵀ @ grad @ A_w`.
pub fn adaptive_avg_backward(f: &mut Function, x_shape: &[usize], grad: &Val) -> Val {
    let a_h = bins(f, x_shape[2], grad.shape[2], grad.dtype);
    let a_w = bins(f, x_shape[3], grad.shape[3], grad.dtype);
    let a_ht = f.transpose(&a_h, &[1, 0]);
    let rows = vec![x_shape[0], x_shape[1], x_shape[2], grad.shape[3]];
    let t = batched_matmul(f, &a_ht, grad, &rows, grad.dtype);
    batched_matmul(f, &t, &a_w, x_shape, grad.dtype)
}
