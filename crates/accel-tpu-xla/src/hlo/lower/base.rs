//! Ops every tensor kind shares: shapes, indexing, masks, creation, casts.

use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{DType, Slice};
use burn_ir::{BaseOperationIr, TensorIr};

use crate::hlo::func::{Function, Unsupported, Val};
use crate::hlo::ops::list;

/// Lowers one shared op; `kind` names the tensor kind for error messages.
pub fn lower(f: &mut Function, op: &BaseOperationIr, kind: &str) -> Result<(), Unsupported> {
    use BaseOperationIr as B;
    match op {
        B::Reshape(o) | B::Expand(o) => {
            let x = f.get(&o.input);
            let v = if o.input.shape.num_elements() == o.out.shape.num_elements() {
                f.reshape(&x, o.out.shape.as_slice())
            } else {
                f.broadcast_to(&x, o.out.shape.as_slice())
            };
            f.set(&o.out, v);
        }
        B::SwapDims(o) => {
            let x = f.get(&o.input);
            let mut perm: Vec<usize> = (0..x.rank()).collect();
            perm.swap(o.dim1, o.dim2);
            let v = f.transpose(&x, &perm);
            f.set(&o.out, v);
        }
        B::Permute(o) => {
            let x = f.get(&o.input);
            let v = f.transpose(&x, &o.axes);
            f.set(&o.out, v);
        }
        B::Flip(o) => {
            let x = f.get(&o.input);
            let v = reverse(f, &x, &o.axes);
            f.set(&o.out, v);
        }
        B::Slice(o) => {
            let x = f.get(&o.tensor);
            let v = slice(f, &x, &o.ranges);
            f.set(&o.out, v);
        }
        B::SliceAssign(o) => {
            let x = f.get(&o.tensor);
            let value = f.get(&o.value);
            let v = slice_assign(f, &x, &o.ranges, &value, kind)?;
            f.set(&o.out, v);
        }
        B::Select(o) => {
            let x = f.get(&o.tensor);
            let idx = f.get(&o.indices);
            let v = index_select(f, &x, o.dim, &idx);
            f.set(&o.out, v);
        }
        B::SelectAssign(o) => {
            let x = f.get(&o.tensor);
            let idx = f.get(&o.indices);
            let value = f.get(&o.value);
            let v = select_assign(f, &x, o.dim, &idx, &value, o.update);
            f.set(&o.out, v);
        }
        B::Gather(o) => {
            let x = f.get(&o.tensor);
            let idx = f.get(&o.indices);
            let v = gather(f, &x, o.dim, &idx);
            f.set(&o.out, v);
        }
        B::Scatter(o) => {
            let x = f.get(&o.tensor);
            let idx = f.get(&o.indices);
            let value = f.get(&o.value);
            let v = scatter(f, &x, o.dim, &idx, &value, o.update);
            f.set(&o.out, v);
        }
        B::MaskWhere(o) => {
            let shape = o.out.shape.to_vec();
            let x = f.get(&o.tensor);
            let x = f.broadcast_to(&x, &shape);
            let mask = f.get(&o.mask);
            let mask = f.broadcast_to(&mask, &shape);
            let value = f.get(&o.value);
            let value = f.broadcast_to(&value, &shape);
            let v = f.select(&mask, &value, &x);
            f.set(&o.out, v);
        }
        B::MaskFill(o) => {
            let shape = o.out.shape.to_vec();
            let x = f.get(&o.tensor);
            let x = f.broadcast_to(&x, &shape);
            let mask = f.get(&o.mask);
            let mask = f.broadcast_to(&mask, &shape);
            let s = f.scalar(&o.value, x.dtype);
            let s = f.broadcast_scalar(&s, &shape);
            let v = f.select(&mask, &s, &x);
            f.set(&o.out, v);
        }
        B::Equal(o) => {
            let (a, b) = f.pair(&o.lhs, &o.rhs, o.out.shape.as_slice());
            let v = f.compare("EQ", &a, &b);
            f.set(&o.out, v);
        }
        B::EqualElem(o) => {
            let a = f.get(&o.lhs);
            let s = f.scalar(&o.rhs, a.dtype);
            let s = f.broadcast_scalar(&s, &a.shape);
            let v = f.compare("EQ", &a, &s);
            f.set(&o.out, v);
        }
        B::RepeatDim(o) => {
            let x = f.get(&o.tensor);
            let mut wide = x.shape.clone();
            wide.insert(o.dim, o.times);
            let dims: Vec<usize> = (0..x.rank())
                .map(|d| if d < o.dim { d } else { d + 1 })
                .collect();
            let attrs = format!("broadcast_dimensions = array<i64{}>", list(&dims));
            let b = f.op("stablehlo.broadcast_in_dim", &[&x], &attrs, &wide, x.dtype);
            f.set(&o.out, b);
        }
        B::Cat(o) => {
            let vals: Vec<Val> = o.tensors.iter().map(|t| f.get(t)).collect();
            let refs: Vec<&Val> = vals.iter().collect();
            let v = f.concatenate(&refs, o.dim);
            f.set(&o.out, v);
        }
        B::Cast(o) => {
            let x = f.get(&o.input);
            let v = f.convert(&x, o.out.dtype);
            f.set(&o.out, v);
        }
        B::Empty(o) | B::Zeros(o) => fill(f, &o.out, 0.0),
        B::Ones(o) => fill(f, &o.out, 1.0),
        B::Unfold(_) => return Err(Unsupported(format!("{kind} unfold"))),
        B::ScatterNd(_) => return Err(Unsupported(format!("{kind} scatter_nd"))),
        B::GatherNd(_) => return Err(Unsupported(format!("{kind} gather_nd"))),
    }
    Ok(())
}

fn fill(f: &mut Function, out: &TensorIr, value: f64) {
    let v = f.constant(value, out.dtype, out.shape.as_slice());
    f.set(out, v);
}

/// `reverse` along `axes`.
pub fn reverse(f: &mut Function, x: &Val, axes: &[usize]) -> Val {
    if axes.is_empty() {
        return x.clone();
    }
    let attrs = format!("dimensions = array<i64{}>", list(axes));
    let shape = x.shape.clone();
    f.op("stablehlo.reverse", &[x], &attrs, &shape, x.dtype)
}

/// burn's slice: per-dim ranges (negative indices from the end, negative steps walk backwards
/// from the range's end), missing trailing dims whole.
fn slice(f: &mut Function, x: &Val, ranges: &[Slice]) -> Val {
    let rank = x.rank();
    let mut start = vec![0; rank];
    let mut limit = x.shape.clone();
    let mut strides = vec![1; rank];
    let mut reversed = Vec::new();
    for (d, s) in ranges.iter().enumerate() {
        let r = s.to_range(x.shape[d]);
        start[d] = r.start;
        limit[d] = r.end.max(r.start);
        if s.step < 0 {
            reversed.push(d);
        } else {
            strides[d] = s.step as usize;
        }
    }
    let mut v = f.slice(x, &start, &limit, &vec![1; rank]);
    if !reversed.is_empty() {
        v = reverse(f, &v, &reversed);
        for &d in &reversed {
            strides[d] = ranges[d].step.unsigned_abs();
        }
    }
    if strides.iter().any(|&s| s != 1) {
        let zero = vec![0; rank];
        let shape = v.shape.clone();
        v = f.slice(&v, &zero, &shape, &strides);
    }
    v
}

/// Writes `value` into the region `ranges` of `x` (unit steps).
fn slice_assign(
    f: &mut Function,
    x: &Val,
    ranges: &[Slice],
    value: &Val,
    kind: &str,
) -> Result<Val, Unsupported> {
    if ranges.iter().any(|s| s.step != 1) {
        return Err(Unsupported(format!(
            "{kind} slice_assign with a step other than 1"
        )));
    }
    let mut starts = Vec::with_capacity(x.rank());
    for d in 0..x.rank() {
        let start = ranges.get(d).map_or(0, |s| s.to_range(x.shape[d]).start);
        starts.push(f.constant(start as f64, DType::I32, &[]));
    }
    let mut args: Vec<&Val> = vec![x, value];
    args.extend(starts.iter());
    let shape = x.shape.clone();
    Ok(f.op("stablehlo.dynamic_update_slice", &args, "", &shape, x.dtype))
}

/// `x` indexed along `dim` by the 1-D `idx` (burn's select / index_select).
pub fn index_select(f: &mut Function, x: &Val, dim: usize, idx: &Val) -> Val {
    let n = idx.shape[0];
    let idx = f.reshape(idx, &[n, 1]);
    let mut sizes = x.shape.clone();
    sizes[dim] = 1;
    let offset: Vec<usize> = (0..x.rank()).filter(|&d| d != dim).collect();
    let mut out = x.shape.clone();
    out[dim] = n;
    let attrs = format!(
        "dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{dim}], start_index_map = [{dim}], index_vector_dim = 1>, slice_sizes = array<i64{}>, indices_are_sorted = false",
        join(&offset),
        list(&sizes)
    );
    f.op("stablehlo.gather", &[x, &idx], &attrs, &out, x.dtype)
}

/// Full coordinates for an indices tensor along `dim`: iotas for the other dims, `idx` for
/// `dim`, stacked on a new last dim (the form gather and scatter take element by element).
fn coordinates(f: &mut Function, idx: &Val, dim: usize) -> Val {
    let rank = idx.rank();
    let mut one = idx.shape.clone();
    one.push(1);
    let parts: Vec<Val> = (0..rank)
        .map(|d| {
            let v = if d == dim {
                f.convert(idx, DType::I32)
            } else {
                f.iota(&idx.shape, d, DType::I32)
            };
            f.reshape(&v, &one)
        })
        .collect();
    let refs: Vec<&Val> = parts.iter().collect();
    f.concatenate(&refs, rank)
}

/// burn's gather: `out[.., i, ..] = x[.., idx[.., i, ..], ..]` along `dim`.
fn gather(f: &mut Function, x: &Val, dim: usize, idx: &Val) -> Val {
    let rank = x.rank();
    let coords = coordinates(f, idx, dim);
    let dims: Vec<usize> = (0..rank).collect();
    let attrs = format!(
        "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [{}], start_index_map = [{}], index_vector_dim = {rank}>, slice_sizes = array<i64{}>, indices_are_sorted = false",
        join(&dims),
        join(&dims),
        list(&vec![1; rank])
    );
    let shape = idx.shape.clone();
    f.op("stablehlo.gather", &[x, &coords], &attrs, &shape, x.dtype)
}

/// burn's scatter: `x[.., idx[.., i, ..], ..] (update)= value[.., i, ..]` along `dim`.
pub fn scatter(
    f: &mut Function,
    x: &Val,
    dim: usize,
    idx: &Val,
    value: &Val,
    update: IndexingUpdateOp,
) -> Val {
    let rank = x.rank();
    let coords = coordinates(f, idx, dim);
    let value = f.reshape(value, &idx.shape);
    let dims: Vec<usize> = (0..rank).collect();
    let attrs = format!(
        "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [{}], scatter_dims_to_operand_dims = [{}], index_vector_dim = {rank}>, indices_are_sorted = false, unique_indices = false",
        join(&dims),
        join(&dims)
    );
    let body = update_body(f, update, x.dtype);
    let shape = x.shape.clone();
    f.op_multi(
        "stablehlo.scatter",
        &[x, &coords, &value],
        &body,
        &attrs,
        &[(shape, x.dtype)],
    )
    .remove(0)
}

/// burn's select_assign: rows `idx[i]` of `x` along `dim` (update)= slice i of `value`.
pub fn select_assign(
    f: &mut Function,
    x: &Val,
    dim: usize,
    idx: &Val,
    value: &Val,
    update: IndexingUpdateOp,
) -> Val {
    let n = idx.shape[0];
    let idx = f.convert(idx, DType::I32);
    let idx = f.reshape(&idx, &[n, 1]);
    let window: Vec<usize> = (0..x.rank()).filter(|&d| d != dim).collect();
    let attrs = format!(
        "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [{}], inserted_window_dims = [{dim}], scatter_dims_to_operand_dims = [{dim}], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false",
        join(&window)
    );
    // Updates are laid out with the scatter dim first, then the window dims in order.
    let mut perm = vec![dim];
    perm.extend(window.iter().copied());
    let value = f.transpose(value, &perm);
    let body = update_body(f, update, x.dtype);
    let shape = x.shape.clone();
    f.op_multi(
        "stablehlo.scatter",
        &[x, &idx, &value],
        &body,
        &attrs,
        &[(shape, x.dtype)],
    )
    .remove(0)
}

fn update_body(f: &mut Function, update: IndexingUpdateOp, dtype: DType) -> String {
    match update {
        IndexingUpdateOp::Add => f.scalar_body("stablehlo.add", dtype),
        IndexingUpdateOp::Mul => f.scalar_body("stablehlo.multiply", dtype),
        IndexingUpdateOp::Min => f.scalar_body("stablehlo.minimum", dtype),
        IndexingUpdateOp::Max => f.scalar_body("stablehlo.maximum", dtype),
        IndexingUpdateOp::Assign => {
            let t = crate::hlo::types::tensor_type(&[], dtype);
            let (x, y) = (f.region_name(), f.region_name());
            format!(
                "      ^bb0({x}: {t}, {y}: {t}):\n        \"stablehlo.return\"({y}) : ({t}) -> ()\n"
            )
        }
    }
}

/// `a, b, c` for a `[...]` list inside a stablehlo attribute.
pub fn join(items: &[usize]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
