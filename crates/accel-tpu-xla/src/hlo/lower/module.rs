//! burn's module ops (linear, embedding, convolution, pooling) and their gradients.

use burn_ir::ModuleOperationIr;

use crate::hlo::func::{Function, Unsupported};
use crate::hlo::lower::conv::{self, Window};
use crate::hlo::lower::elementwise::batched_matmul;
use crate::hlo::lower::pool::{self, Pool};

/// The [`Window`] of any conv options struct (1, 2 or 3 spatial dims; they share field names).
macro_rules! window {
    ($o:expr) => {
        window(&$o.stride, &$o.padding, &$o.dilation, $o.groups)
    };
}

/// Lowers one module op.
pub fn lower(f: &mut Function, op: &ModuleOperationIr) -> Result<(), Unsupported> {
    use ModuleOperationIr as M;
    match op {
        M::Linear(o) => {
            let x = f.get(&o.x);
            let w = f.get(&o.weight);
            let mut v = batched_matmul(f, &x, &w, o.out.shape.as_slice(), o.out.dtype);
            if let Some(bias) = &o.bias {
                let b = f.get(bias);
                let b = f.broadcast_to(&b, o.out.shape.as_slice());
                v = f.binary("stablehlo.add", &v, &b);
            }
            f.set(&o.out, v);
        }
        M::LinearXBackward(o) => {
            let w = f.get(&o.weight);
            let wt = f.transpose(&w, &[1, 0]);
            let g = f.get(&o.output_grad);
            let v = batched_matmul(f, &g, &wt, o.out.shape.as_slice(), o.out.dtype);
            f.set(&o.out, v);
        }
        M::LinearWeightBackward(o) => {
            // xᵀ @ grad summed over the batch dims: one contraction over every leading dim.
            let x = f.get(&o.x);
            let g = f.get(&o.output_grad);
            let lead = x.rank() - 1;
            let rows: usize = x.shape[..lead].iter().product();
            let x2 = f.reshape(&x, &[rows, x.shape[lead]]);
            let g2 = f.reshape(&g, &[rows, g.shape[lead]]);
            let xt = f.transpose(&x2, &[1, 0]);
            let v = batched_matmul(f, &xt, &g2, o.out.shape.as_slice(), o.out.dtype);
            f.set(&o.out, v);
        }
        M::LinearBiasBackward(o) => {
            let g = f.get(&o.output_grad);
            let dims: Vec<usize> = (0..g.rank() - 1).collect();
            let v = f.reduce(&g, &dims, "stablehlo.add", 0.0);
            f.set(&o.out, v);
        }
        M::Embedding(o) => {
            let w = f.get(&o.weights);
            let idx = f.get(&o.indices);
            let v = embedding(f, &w, &idx, o.out.shape.as_slice());
            f.set(&o.out, v);
        }
        M::EmbeddingBackward(o) => {
            let g = f.get(&o.out_grad);
            let idx = f.get(&o.indices);
            let v = embedding_backward(f, o.weights.shape.as_slice(), &g, &idx);
            f.set(&o.out, v);
        }
        M::Conv1d(o) => conv::forward(
            f,
            &o.x,
            &o.weight,
            o.bias.as_ref(),
            &window!(o.options),
            &o.out,
        ),
        M::Conv2d(o) => conv::forward(
            f,
            &o.x,
            &o.weight,
            o.bias.as_ref(),
            &window!(o.options),
            &o.out,
        ),
        M::Conv3d(o) => conv::forward(
            f,
            &o.x,
            &o.weight,
            o.bias.as_ref(),
            &window!(o.options),
            &o.out,
        ),
        M::Conv1dXBackward(o) => conv_x(
            f,
            &o.x,
            &o.weight,
            &o.output_grad,
            &window!(o.options),
            &o.out,
        ),
        M::Conv2dXBackward(o) => conv_x(
            f,
            &o.x,
            &o.weight,
            &o.output_grad,
            &window!(o.options),
            &o.out,
        ),
        M::Conv3dXBackward(o) => conv_x(
            f,
            &o.x,
            &o.weight,
            &o.output_grad,
            &window!(o.options),
            &o.out,
        ),
        M::Conv1dWeightBackward(o) => conv_w(f, &o.x, &o.output_grad, &window!(o.options), &o.out),
        M::Conv2dWeightBackward(o) => conv_w(f, &o.x, &o.output_grad, &window!(o.options), &o.out),
        M::Conv3dWeightBackward(o) => conv_w(f, &o.x, &o.output_grad, &window!(o.options), &o.out),
        M::Conv1dBiasBackward(o) => conv_bias(f, &o.output_grad, &o.out),
        M::Conv2dBiasBackward(o) => conv_bias(f, &o.output_grad, &o.out),
        M::Conv3dBiasBackward(o) => conv_bias(f, &o.output_grad, &o.out),
        M::MaxPool2d(o) => {
            let x = f.get(&o.x);
            let p = Pool {
                kernel: o.kernel_size,
                stride: o.stride,
                padding: o.padding,
                dilation: o.dilation,
            };
            let v = pool::max(f, &x, &p, o.out.shape.as_slice());
            f.set(&o.out, v);
        }
        M::MaxPool2dWithIndices(o) => {
            let x = f.get(&o.x);
            let p = Pool {
                kernel: o.kernel_size,
                stride: o.stride,
                padding: o.padding,
                dilation: o.dilation,
            };
            let (v, i) =
                pool::max_with_indices(f, &x, &p, o.out.shape.as_slice(), o.out_indices.dtype);
            f.set(&o.out, v);
            f.set(&o.out_indices, i);
        }
        M::MaxPool2dWithIndicesBackward(o) => {
            let g = f.get(&o.grad);
            let i = f.get(&o.indices);
            let v = pool::max_backward(f, o.x.shape.as_slice(), &g, &i);
            f.set(&o.out, v);
        }
        M::AvgPool2d(o) => {
            let x = f.get(&o.x);
            let p = Pool {
                kernel: o.kernel_size,
                stride: o.stride,
                padding: o.padding,
                dilation: [1, 1],
            };
            let v = pool::avg(f, &x, &p, o.out.shape.as_slice(), o.count_include_pad);
            f.set(&o.out, v);
        }
        M::AvgPool2dBackward(o) => {
            let x = f.get(&o.x);
            let g = f.get(&o.grad);
            let p = Pool {
                kernel: o.kernel_size,
                stride: o.stride,
                padding: o.padding,
                dilation: [1, 1],
            };
            let v = pool::avg_backward(f, &x, &g, &p, o.count_include_pad);
            f.set(&o.out, v);
        }
        M::AdaptiveAvgPool2d(o) => {
            let x = f.get(&o.x);
            let v = pool::adaptive_avg(f, &x, o.out.shape.as_slice());
            f.set(&o.out, v);
        }
        M::AdaptiveAvgPool2dBackward(o) => {
            let g = f.get(&o.grad);
            let v = pool::adaptive_avg_backward(f, o.x.shape.as_slice(), &g);
            f.set(&o.out, v);
        }
        other => return Err(Unsupported(format!("module op {}", name(other)))),
    }
    Ok(())
}

fn window(stride: &[usize], padding: &[usize], dilation: &[usize], groups: usize) -> Window {
    Window {
        stride: stride.to_vec(),
        padding: padding.to_vec(),
        dilation: dilation.to_vec(),
        groups,
    }
}

fn conv_x(
    f: &mut Function,
    x: &burn_ir::TensorIr,
    weight: &burn_ir::TensorIr,
    grad: &burn_ir::TensorIr,
    w: &Window,
    out: &burn_ir::TensorIr,
) {
    let wv = f.get(weight);
    let g = f.get(grad);
    let v = conv::x_backward(f, x.shape.as_slice(), &wv, &g, w);
    f.set(out, v);
}

fn conv_w(
    f: &mut Function,
    x: &burn_ir::TensorIr,
    grad: &burn_ir::TensorIr,
    w: &Window,
    out: &burn_ir::TensorIr,
) {
    let xv = f.get(x);
    let g = f.get(grad);
    let v = conv::weight_backward(f, &xv, &g, w, out.shape.as_slice());
    f.set(out, v);
}

fn conv_bias(f: &mut Function, grad: &burn_ir::TensorIr, out: &burn_ir::TensorIr) {
    let g = f.get(grad);
    let v = conv::bias_backward(f, &g);
    f.set(out, v);
}

/// Rows `indices` of `weights` [n, d]: out [.., d].
fn embedding(
    f: &mut Function,
    w: &crate::hlo::func::Val,
    idx: &crate::hlo::func::Val,
    out: &[usize],
) -> crate::hlo::func::Val {
    let r = idx.rank();
    let mut shape = idx.shape.clone();
    shape.push(1);
    let idx = f.reshape(idx, &shape);
    let attrs = format!(
        "dimension_numbers = #stablehlo.gather<offset_dims = [{r}], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = {r}>, slice_sizes = array<i64: 1, {}>, indices_are_sorted = false",
        w.shape[1]
    );
    f.op("stablehlo.gather", &[w, &idx], &attrs, out, w.dtype)
}

/// The embedding's gradient: rows of `grad` added into zeros at `indices`.
fn embedding_backward(
    f: &mut Function,
    weights: &[usize],
    g: &crate::hlo::func::Val,
    idx: &crate::hlo::func::Val,
) -> crate::hlo::func::Val {
    let r = idx.rank();
    let mut shape = idx.shape.clone();
    shape.push(1);
    let idx = f.reshape(idx, &shape);
    let zeros = f.constant(0.0, g.dtype, weights);
    let body = f.scalar_body("stablehlo.add", g.dtype);
    let attrs = format!(
        "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [{r}], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = {r}>, indices_are_sorted = false, unique_indices = false"
    );
    f.op_multi(
        "stablehlo.scatter",
        &[&zeros, &idx, g],
        &body,
        &attrs,
        &[(weights.to_vec(), g.dtype)],
    )
    .remove(0)
}

/// The variant's name, for the error naming an op not lowered.
fn name(op: &ModuleOperationIr) -> String {
    let text = format!("{op:?}");
    text.split(['(', ' ', '{']).next().unwrap_or("?").to_owned()
}
