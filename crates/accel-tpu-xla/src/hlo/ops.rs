//! The StableHLO ops every lowering builds from: shapes, conversions, broadcasting, slicing,
//! comparisons, reductions.

use burn_backend::DType;
use burn_ir::TensorIr;

use super::func::{Function, Val};
use super::types::tensor_type;

/// Shape helpers every lowering uses.
impl Function {
    /// `reshape` to `shape` (same element count).
    pub fn reshape(&mut self, v: &Val, shape: &[usize]) -> Val {
        if v.shape == shape {
            return v.clone();
        }
        self.op("stablehlo.reshape", &[v], "", shape, v.dtype)
    }

    /// Element type conversion.
    pub fn convert(&mut self, v: &Val, dtype: DType) -> Val {
        if v.dtype == dtype {
            return v.clone();
        }
        let shape = v.shape.clone();
        self.op("stablehlo.convert", &[v], "", &shape, dtype)
    }

    /// A 0-d value broadcast to `shape`.
    pub fn broadcast_scalar(&mut self, v: &Val, shape: &[usize]) -> Val {
        if v.shape == shape {
            return v.clone();
        }
        let v = self.reshape(v, &[]);
        self.op(
            "stablehlo.broadcast_in_dim",
            &[&v],
            "broadcast_dimensions = array<i64>",
            shape,
            v.dtype,
        )
    }

    /// Numpy-style broadcast of `v` to `shape` (dims aligned on the right; size-1 dims grow).
    pub fn broadcast_to(&mut self, v: &Val, shape: &[usize]) -> Val {
        if v.shape == shape {
            return v.clone();
        }
        let offset = shape.len() - v.rank();
        // Size-1 dims that grow are dropped first, then broadcast_in_dim maps the rest.
        let kept: Vec<usize> = (0..v.rank())
            .filter(|&i| v.shape[i] == shape[offset + i])
            .collect();
        let squeezed: Vec<usize> = kept.iter().map(|&i| v.shape[i]).collect();
        let v = self.reshape(v, &squeezed);
        let dims: Vec<String> = kept.iter().map(|&i| (offset + i).to_string()).collect();
        let attrs = format!("broadcast_dimensions = array<i64{}>", list(&dims));
        self.op("stablehlo.broadcast_in_dim", &[&v], &attrs, shape, v.dtype)
    }

    /// Tensors `lhs` and `rhs` of a binary op, each broadcast to the op's output `shape`.
    pub fn pair(&mut self, lhs: &TensorIr, rhs: &TensorIr, shape: &[usize]) -> (Val, Val) {
        let a = self.get(lhs);
        let a = self.broadcast_to(&a, shape);
        let b = self.get(rhs);
        let b = self.broadcast_to(&b, shape);
        (a, b)
    }

    /// `transpose` by `perm` (output dim i is input dim `perm[i]`).
    pub fn transpose(&mut self, v: &Val, perm: &[usize]) -> Val {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return v.clone();
        }
        let shape: Vec<usize> = perm.iter().map(|&p| v.shape[p]).collect();
        let attrs = format!("permutation = array<i64{}>", list(perm));
        self.op("stablehlo.transpose", &[v], &attrs, &shape, v.dtype)
    }

    /// An iota of `dtype` along `dim` of `shape`.
    pub fn iota(&mut self, shape: &[usize], dim: usize, dtype: DType) -> Val {
        let attrs = format!("iota_dimension = {dim} : i64");
        self.op("stablehlo.iota", &[], &attrs, shape, dtype)
    }

    /// An elementwise op of two values of the same shape.
    pub fn binary(&mut self, name: &str, a: &Val, b: &Val) -> Val {
        let shape = a.shape.clone();
        self.op(name, &[a, b], "", &shape, a.dtype)
    }

    /// An elementwise op of one value.
    pub fn unary(&mut self, name: &str, a: &Val) -> Val {
        let shape = a.shape.clone();
        self.op(name, &[a], "", &shape, a.dtype)
    }

    /// `compare` with `direction` (EQ, NE, LT, LE, GT, GE), giving booleans.
    pub fn compare(&mut self, direction: &str, a: &Val, b: &Val) -> Val {
        let kind = if a.dtype.is_float() {
            "FLOAT"
        } else if a.dtype.is_uint() || a.dtype.is_bool() {
            "UNSIGNED"
        } else {
            "SIGNED"
        };
        let attrs = format!(
            "comparison_direction = #stablehlo<comparison_direction {direction}>, compare_type = #stablehlo<comparison_type {kind}>"
        );
        let shape = a.shape.clone();
        self.op(
            "stablehlo.compare",
            &[a, b],
            &attrs,
            &shape,
            DType::Bool(burn_backend::BoolStore::Native),
        )
    }

    /// `select(pred, on_true, on_false)`.
    pub fn select(&mut self, pred: &Val, on_true: &Val, on_false: &Val) -> Val {
        let shape = on_true.shape.clone();
        self.op(
            "stablehlo.select",
            &[pred, on_true, on_false],
            "",
            &shape,
            on_true.dtype,
        )
    }

    /// `slice` with per-dim start, limit and stride.
    pub fn slice(&mut self, v: &Val, start: &[usize], limit: &[usize], strides: &[usize]) -> Val {
        let shape: Vec<usize> = (0..v.rank())
            .map(|i| (limit[i] - start[i]).div_ceil(strides[i]))
            .collect();
        let attrs = format!(
            "start_indices = array<i64{}>, limit_indices = array<i64{}>, strides = array<i64{}>",
            list(start),
            list(limit),
            list(strides)
        );
        self.op("stablehlo.slice", &[v], &attrs, &shape, v.dtype)
    }

    /// `concatenate` along `dim`.
    pub fn concatenate(&mut self, vals: &[&Val], dim: usize) -> Val {
        let mut shape = vals[0].shape.clone();
        shape[dim] = vals.iter().map(|v| v.shape[dim]).sum();
        let attrs = format!("dimension = {dim} : i64");
        self.op("stablehlo.concatenate", vals, &attrs, &shape, vals[0].dtype)
    }

    /// A reduction over `dims` with the binary op `combiner` (e.g. `stablehlo.add`) from `init`.
    pub fn reduce(&mut self, v: &Val, dims: &[usize], combiner: &str, init: f64) -> Val {
        let init = self.constant(init, v.dtype, &[]);
        let shape: Vec<usize> = (0..v.rank())
            .filter(|d| !dims.contains(d))
            .map(|d| v.shape[d])
            .collect();
        let body = self.scalar_body(combiner, v.dtype);
        let attrs = format!("dimensions = array<i64{}>", list(dims));
        self.op_multi(
            "stablehlo.reduce",
            &[v, &init],
            &body,
            &attrs,
            &[(shape, v.dtype)],
        )
        .remove(0)
    }

    /// The region `^bb0(%x, %y): return combiner(%x, %y)` on 0-d values of `dtype`.
    pub fn scalar_body(&mut self, combiner: &str, dtype: DType) -> String {
        let t = tensor_type(&[], dtype);
        let (x, y, r) = (self.region_name(), self.region_name(), self.region_name());
        format!(
            "      ^bb0({x}: {t}, {y}: {t}):\n        {r} = \"{combiner}\"({x}, {y}) : ({t}, {t}) -> {t}\n        \"stablehlo.return\"({r}) : ({t}) -> ()\n"
        )
    }
}

/// `, a, b, c` for an `array<i64 ...>` attribute (empty for no elements).
pub fn list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!(": {}", parts.join(", "))
}
