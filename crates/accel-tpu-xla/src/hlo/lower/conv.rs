//! Convolutions (1, 2 and 3 spatial dims) and their gradients as `stablehlo.convolution`.

use burn_ir::TensorIr;

use crate::hlo::func::{Function, Val};
use crate::hlo::lower::base::reverse;
use crate::hlo::ops::list;

/// A convolution's window: per spatial dim stride, padding (both sides), dilation; groups.
pub struct Window {
    /// Step between windows.
    pub stride: Vec<usize>,
    /// Zeros added before and after.
    pub padding: Vec<usize>,
    /// Spacing of the kernel's taps.
    pub dilation: Vec<usize>,
    /// Feature groups.
    pub groups: usize,
}

/// `b, f, 0, 1, ..` for `spatial` dims, with the first two labels given.
fn labels(first: &str, second: &str, spatial: usize) -> String {
    let mut parts = vec![first.to_owned(), second.to_owned()];
    parts.extend((0..spatial).map(|d| d.to_string()));
    format!("[{}]", parts.join(", "))
}

#[allow(clippy::too_many_arguments)]
fn convolution(
    f: &mut Function,
    lhs: &Val,
    rhs: &Val,
    numbers: (&str, &str, &str),
    strides: &[usize],
    padding: &[(i64, i64)],
    lhs_dilation: &[usize],
    rhs_dilation: &[usize],
    feature_groups: usize,
    batch_groups: usize,
    out: &[usize],
) -> Val {
    let pads: Vec<String> = padding
        .iter()
        .map(|(lo, hi)| format!("[{lo}, {hi}]"))
        .collect();
    let attrs = format!(
        "window_strides = array<i64{}>, padding = dense<[{}]> : tensor<{}x2xi64>, lhs_dilation = array<i64{}>, rhs_dilation = array<i64{}>, dimension_numbers = #stablehlo.conv<{}x{}->{}>, feature_group_count = {feature_groups} : i64, batch_group_count = {batch_groups} : i64",
        list(strides),
        pads.join(", "),
        padding.len(),
        list(lhs_dilation),
        list(rhs_dilation),
        numbers.0,
        numbers.1,
        numbers.2
    );
    f.op("stablehlo.convolution", &[lhs, rhs], &attrs, out, lhs.dtype)
}

/// The forward convolution: `x` [b, c_in, ..], `weight` [c_out, c_in / groups, k..], an optional
/// `bias` [c_out].
pub fn forward(
    f: &mut Function,
    x: &TensorIr,
    weight: &TensorIr,
    bias: Option<&TensorIr>,
    w: &Window,
    out: &TensorIr,
) {
    let xv = f.get(x);
    let wv = f.get(weight);
    let n = xv.rank() - 2;
    let pad: Vec<(i64, i64)> = w.padding.iter().map(|&p| (p as i64, p as i64)).collect();
    let numbers = (
        labels("b", "f", n),
        labels("o", "i", n),
        labels("b", "f", n),
    );
    let mut v = convolution(
        f,
        &xv,
        &wv,
        (&numbers.0, &numbers.1, &numbers.2),
        &w.stride,
        &pad,
        &vec![1; n],
        &w.dilation,
        w.groups,
        1,
        out.shape.as_slice(),
    );
    if let Some(bias) = bias {
        let b = f.get(bias);
        let mut shape = vec![1; n + 2];
        shape[1] = b.shape[0];
        let b = f.reshape(&b, &shape);
        let b = f.broadcast_to(&b, out.shape.as_slice());
        v = f.binary("stablehlo.add", &v, &b);
    }
    f.set(out, v);
}

/// The gradient for `x`: `grad` convolved with the spatially reversed kernel, its input and
/// output features swapped within each group.
pub fn x_backward(f: &mut Function, x_shape: &[usize], wv: &Val, grad: &Val, w: &Window) -> Val {
    let n = x_shape.len() - 2;
    let (c_out, c_in_group) = (wv.shape[0], wv.shape[1]);
    let g = w.groups;
    let kernel = &wv.shape[2..];
    // [c_out, c_in/g, k..] -> [g, c_out/g, c_in/g, k..] -> [g, c_in/g, c_out/g, k..] -> [c_in, c_out/g, k..]
    let mut grouped = vec![g, c_out / g, c_in_group];
    grouped.extend_from_slice(kernel);
    let k = f.reshape(wv, &grouped);
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + n);
    let k = f.transpose(&k, &perm);
    let mut swapped = vec![g * c_in_group, c_out / g];
    swapped.extend_from_slice(kernel);
    let k = f.reshape(&k, &swapped);
    let spatial: Vec<usize> = (2..2 + n).collect();
    let k = reverse(f, &k, &spatial);
    let padding: Vec<(i64, i64)> = (0..n)
        .map(|d| {
            let span = (w.dilation[d] * (kernel[d] - 1)) as i64;
            let lo = span - w.padding[d] as i64;
            let hi = x_shape[2 + d] as i64 + w.padding[d] as i64
                - 1
                - (grad.shape[2 + d] as i64 - 1) * w.stride[d] as i64;
            (lo, hi)
        })
        .collect();
    let numbers = (
        labels("b", "f", n),
        labels("o", "i", n),
        labels("b", "f", n),
    );
    convolution(
        f,
        grad,
        &k,
        (&numbers.0, &numbers.1, &numbers.2),
        &vec![1; n],
        &padding,
        &w.stride,
        &w.dilation,
        g,
        1,
        x_shape,
    )
}

/// The gradient for the kernel: `x` (batch as features) convolved with `grad` (batch as input
/// features), the forward stride becoming the kernel's dilation.
pub fn weight_backward(
    f: &mut Function,
    xv: &Val,
    grad: &Val,
    w: &Window,
    weight_shape: &[usize],
) -> Val {
    let n = xv.rank() - 2;
    let kernel = &weight_shape[2..];
    let padding: Vec<(i64, i64)> = (0..n)
        .map(|d| {
            let lo = w.padding[d] as i64;
            let hi = ((kernel[d] - 1) * w.dilation[d]) as i64
                + (w.stride[d] * (grad.shape[2 + d] - 1)) as i64
                + 1
                - xv.shape[2 + d] as i64
                - lo;
            (lo, hi)
        })
        .collect();
    let numbers = (
        labels("f", "b", n),
        labels("i", "o", n),
        labels("f", "b", n),
    );
    // Output [c_out, c_in / groups, k..]: lhs batch = x's channels, grouped by batch_group_count.
    convolution(
        f,
        xv,
        grad,
        (&numbers.0, &numbers.1, &numbers.2),
        &w.dilation,
        &padding,
        &vec![1; n],
        &w.stride,
        1,
        w.groups,
        weight_shape,
    )
}

/// The gradient for the bias: `grad` summed over batch and space.
pub fn bias_backward(f: &mut Function, grad: &Val) -> Val {
    let dims: Vec<usize> = (0..grad.rank()).filter(|&d| d != 1).collect();
    f.reduce(grad, &dims, "stablehlo.add", 0.0)
}
