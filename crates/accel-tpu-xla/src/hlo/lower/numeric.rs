//! Arithmetic, comparisons and reductions shared by float and int tensors.

use burn_backend::DType;
use burn_ir::{BinaryOpIr, NumericOperationIr, ReduceDimOpIr, ScalarOpIr, TensorIr};

use crate::hlo::func::{Function, Unsupported, Val};

/// Lowers one numeric op on tensors of `dtype`.
pub fn lower(f: &mut Function, op: &NumericOperationIr, kind: &str) -> Result<(), Unsupported> {
    use NumericOperationIr as N;
    match op {
        N::Add(o) => binary(f, o, "stablehlo.add"),
        N::Sub(o) => binary(f, o, "stablehlo.subtract"),
        N::Mul(o) => binary(f, o, "stablehlo.multiply"),
        N::Div(o) => binary(f, o, "stablehlo.divide"),
        N::Powi(o) => binary(f, o, "stablehlo.power"),
        N::Rem(o) => {
            let (a, b) = operands(f, o);
            let v = remainder(f, &a, &b);
            f.set(&o.out, v);
        }
        N::AddScalar(o) => scalar(f, o, "stablehlo.add"),
        N::SubScalar(o) => scalar(f, o, "stablehlo.subtract"),
        N::MulScalar(o) => scalar(f, o, "stablehlo.multiply"),
        N::DivScalar(o) => scalar(f, o, "stablehlo.divide"),
        N::PowiScalar(o) => scalar(f, o, "stablehlo.power"),
        N::RemScalar(o) => {
            let (a, b) = scalar_operands(f, o);
            let v = remainder(f, &a, &b);
            f.set(&o.out, v);
        }
        N::Abs(o) => {
            let x = f.get(&o.input);
            let v = f.unary("stablehlo.abs", &x);
            f.set(&o.out, v);
        }
        N::Full(o) => {
            let s = f.scalar(&o.value, o.out.dtype);
            let v = f.broadcast_scalar(&s, o.out.shape.as_slice());
            f.set(&o.out, v);
        }
        N::Sum(o) => reduce_all(f, &o.input, &o.out, "stablehlo.add", 0.0),
        N::Prod(o) => reduce_all(f, &o.input, &o.out, "stablehlo.multiply", 1.0),
        N::Max(o) => reduce_all(f, &o.input, &o.out, "stablehlo.maximum", f64::NEG_INFINITY),
        N::Min(o) => reduce_all(f, &o.input, &o.out, "stablehlo.minimum", f64::INFINITY),
        N::MaxAbs(o) => {
            let x = f.get(&o.input);
            let a = f.unary("stablehlo.abs", &x);
            let dims: Vec<usize> = (0..a.rank()).collect();
            let v = f.reduce(&a, &dims, "stablehlo.maximum", lowest(a.dtype));
            f.set(&o.out, v);
        }
        N::Mean(o) => {
            let x = f.get(&o.input);
            let dims: Vec<usize> = (0..x.rank()).collect();
            let s = f.reduce(&x, &dims, "stablehlo.add", 0.0);
            let n = f.constant(o.input.shape.num_elements() as f64, x.dtype, &[]);
            let v = f.binary("stablehlo.divide", &s, &n);
            f.set(&o.out, v);
        }
        N::SumDim(o) => reduce_dim(f, o, "stablehlo.add", 0.0),
        N::ProdDim(o) => reduce_dim(f, o, "stablehlo.multiply", 1.0),
        N::MaxDim(o) => reduce_dim(f, o, "stablehlo.maximum", f64::NEG_INFINITY),
        N::MinDim(o) => reduce_dim(f, o, "stablehlo.minimum", f64::INFINITY),
        N::MaxAbsDim(o) => {
            let x = f.get(&o.input);
            let a = f.unary("stablehlo.abs", &x);
            let v = f.reduce(&a, &[o.axis], "stablehlo.maximum", lowest(a.dtype));
            f.set(&o.out, v);
        }
        N::MeanDim(o) => {
            let x = f.get(&o.input);
            let s = f.reduce(&x, &[o.axis], "stablehlo.add", 0.0);
            let n = f.constant(x.shape[o.axis] as f64, x.dtype, &s.shape);
            let v = f.binary("stablehlo.divide", &s, &n);
            f.set(&o.out, v);
        }
        N::ArgMax(o) => arg(f, o, "GT"),
        N::ArgMin(o) => arg(f, o, "LT"),
        N::MaxDimWithIndices(o) | N::MinDimWithIndices(o) => {
            let dir = if matches!(op, N::MaxDimWithIndices(_)) {
                "GT"
            } else {
                "LT"
            };
            let x = f.get(&o.tensor);
            let (values, indices) = arg_reduce(f, &x, o.dim, dir, o.out_indices.dtype);
            f.set(&o.out, values);
            f.set(&o.out_indices, indices);
        }
        N::Greater(o) => compare(f, o, "GT"),
        N::GreaterEqual(o) => compare(f, o, "GE"),
        N::Lower(o) => compare(f, o, "LT"),
        N::LowerEqual(o) => compare(f, o, "LE"),
        N::GreaterElem(o) => compare_scalar(f, o, "GT"),
        N::GreaterEqualElem(o) => compare_scalar(f, o, "GE"),
        N::LowerElem(o) => compare_scalar(f, o, "LT"),
        N::LowerEqualElem(o) => compare_scalar(f, o, "LE"),
        N::Clamp(o) => {
            let x = f.get(&o.tensor);
            let lo = f.scalar(&o.min, x.dtype);
            let hi = f.scalar(&o.max, x.dtype);
            let lo = f.broadcast_scalar(&lo, &x.shape);
            let hi = f.broadcast_scalar(&hi, &x.shape);
            let v = f.op(
                "stablehlo.clamp",
                &[&lo, &x, &hi],
                "",
                &x.shape.clone(),
                x.dtype,
            );
            f.set(&o.out, v);
        }
        N::CumSum(o) => cumulative(f, &o.input, &o.out, o.axis, "stablehlo.add", 0.0),
        N::CumProd(o) => cumulative(f, &o.input, &o.out, o.axis, "stablehlo.multiply", 1.0),
        N::CumMax(o) => cumulative(
            f,
            &o.input,
            &o.out,
            o.axis,
            "stablehlo.maximum",
            f64::NEG_INFINITY,
        ),
        N::CumMin(o) => cumulative(
            f,
            &o.input,
            &o.out,
            o.axis,
            "stablehlo.minimum",
            f64::INFINITY,
        ),
        N::IntRandom(_) => unreachable!("random tensors are made on the host when recorded"),
        N::ArgTopK(_) | N::TopK(_) => return Err(Unsupported(format!("{kind} top_k"))),
    }
    Ok(())
}

/// The most negative value of `dtype` as the identity of a max (ints have no -inf).
fn lowest(dtype: DType) -> f64 {
    if dtype.is_float() {
        f64::NEG_INFINITY
    } else {
        0.0
    }
}

fn operands(f: &mut Function, o: &BinaryOpIr) -> (Val, Val) {
    f.pair(&o.lhs, &o.rhs, o.out.shape.as_slice())
}

fn scalar_operands(f: &mut Function, o: &ScalarOpIr) -> (Val, Val) {
    let a = f.get(&o.lhs);
    let s = f.scalar(&o.rhs, a.dtype);
    let s = f.broadcast_scalar(&s, &a.shape);
    (a, s)
}

/// A binary op with numpy broadcasting to the output's shape.
pub(super) fn binary(f: &mut Function, o: &BinaryOpIr, name: &str) {
    let (a, b) = operands(f, o);
    let v = f.binary(name, &a, &b);
    f.set(&o.out, v);
}

/// A binary op of a tensor and a lifted scalar.
pub(super) fn scalar(f: &mut Function, o: &ScalarOpIr, name: &str) {
    let (a, s) = scalar_operands(f, o);
    let v = f.binary(name, &a, &s);
    f.set(&o.out, v);
}

fn compare(f: &mut Function, o: &BinaryOpIr, direction: &str) {
    let (a, b) = operands(f, o);
    let v = f.compare(direction, &a, &b);
    f.set(&o.out, v);
}

fn compare_scalar(f: &mut Function, o: &ScalarOpIr, direction: &str) {
    let (a, s) = scalar_operands(f, o);
    let v = f.compare(direction, &a, &s);
    f.set(&o.out, v);
}

/// burn's remainder: the sign of the divisor, `((a % b) + b) % b`.
fn remainder(f: &mut Function, a: &Val, b: &Val) -> Val {
    let r = f.binary("stablehlo.remainder", a, b);
    let r = f.binary("stablehlo.add", &r, b);
    f.binary("stablehlo.remainder", &r, b)
}

fn reduce_all(f: &mut Function, input: &TensorIr, out: &TensorIr, combiner: &str, init: f64) {
    let x = f.get(input);
    let dims: Vec<usize> = (0..x.rank()).collect();
    let init = if x.dtype.is_float() {
        init
    } else {
        int_identity(combiner, x.dtype)
    };
    let v = f.reduce(&x, &dims, combiner, init);
    f.set(out, v);
}

fn reduce_dim(f: &mut Function, o: &ReduceDimOpIr, combiner: &str, init: f64) {
    let x = f.get(&o.input);
    let init = if x.dtype.is_float() {
        init
    } else {
        int_identity(combiner, x.dtype)
    };
    let v = f.reduce(&x, &[o.axis], combiner, init);
    f.set(&o.out, v);
}

/// The identity of an int reduction: the type's extreme for max/min.
fn int_identity(combiner: &str, dtype: DType) -> f64 {
    let (lo, hi) = match dtype {
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
        DType::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
        DType::U8 => (0.0, f64::from(u8::MAX)),
        DType::U16 => (0.0, f64::from(u16::MAX)),
        DType::U32 => (0.0, f64::from(u32::MAX)),
        _ => (0.0, u64::MAX as f64),
    };
    match combiner {
        "stablehlo.maximum" => lo,
        "stablehlo.minimum" => hi,
        "stablehlo.multiply" => 1.0,
        _ => 0.0,
    }
}

fn arg(f: &mut Function, o: &ReduceDimOpIr, direction: &str) {
    let x = f.get(&o.input);
    let (_, indices) = arg_reduce(f, &x, o.axis, direction, o.out.dtype);
    f.set(&o.out, indices);
}

/// The max (`GT`) or min (`LT`) along `dim` and its index; ties go to the first index, NaN
/// wins (as burn-flex's scans do).
fn arg_reduce(f: &mut Function, x: &Val, dim: usize, direction: &str, index: DType) -> (Val, Val) {
    let iota = f.iota(&x.shape, dim, index);
    let init_v = if direction == "GT" {
        lowest_or(x.dtype, f64::NEG_INFINITY)
    } else {
        highest_or(x.dtype)
    };
    let init_v = f.constant(init_v, x.dtype, &[]);
    let init_i = f.constant(0.0, index, &[]);
    let body = arg_body(f, direction, x.dtype, index);
    let shape: Vec<usize> = (0..x.rank())
        .filter(|&d| d != dim)
        .map(|d| x.shape[d])
        .collect();
    let attrs = format!("dimensions = array<i64: {dim}>");
    let mut outs = f.op_multi(
        "stablehlo.reduce",
        &[x, &iota, &init_v, &init_i],
        &body,
        &attrs,
        &[(shape.clone(), x.dtype), (shape, index)],
    );
    let indices = outs.pop().expect("two results");
    let values = outs.pop().expect("two results");
    (values, indices)
}

fn lowest_or(dtype: DType, float: f64) -> f64 {
    if dtype.is_float() {
        float
    } else {
        int_identity("stablehlo.maximum", dtype)
    }
}

fn highest_or(dtype: DType) -> f64 {
    if dtype.is_float() {
        f64::INFINITY
    } else {
        int_identity("stablehlo.minimum", dtype)
    }
}

/// An inclusive scan along `axis` as a `reduce_window` whose window reaches back over the
/// whole dim.
fn cumulative(
    f: &mut Function,
    input: &TensorIr,
    out: &TensorIr,
    axis: usize,
    combiner: &str,
    init: f64,
) {
    let x = f.get(input);
    let init = if x.dtype.is_float() {
        init
    } else {
        int_identity(combiner, x.dtype)
    };
    let n = x.shape[axis];
    let dims: Vec<usize> = (0..x.rank())
        .map(|d| if d == axis { n } else { 1 })
        .collect();
    let padding: Vec<String> = (0..x.rank())
        .map(|d| {
            if d == axis {
                format!("[{}, 0]", n - 1)
            } else {
                "[0, 0]".into()
            }
        })
        .collect();
    let init = f.constant(init, x.dtype, &[]);
    let body = f.scalar_body(combiner, x.dtype);
    let attrs = format!(
        "window_dimensions = array<i64{}>, padding = dense<[{}]> : tensor<{}x2xi64>",
        crate::hlo::ops::list(&dims),
        padding.join(", "),
        x.rank()
    );
    let shape = x.shape.clone();
    let v = f
        .op_multi(
            "stablehlo.reduce_window",
            &[&x, &init],
            &body,
            &attrs,
            &[(shape, x.dtype)],
        )
        .remove(0);
    f.set(out, v);
}

/// The region of a (value, index) reduction keeping the max (`GT`) or min (`LT`): ties go to the
/// lower index and NaN wins, whichever side the reduction puts them on.
pub(super) fn arg_body(f: &mut Function, direction: &str, value: DType, index: DType) -> String {
    let tv = crate::hlo::types::tensor_type(&[], value);
    let ti = crate::hlo::types::tensor_type(&[], index);
    let tb = crate::hlo::types::tensor_type(&[], DType::Bool(burn_backend::BoolStore::Native));
    let [
        a,
        ai,
        b,
        bi,
        better,
        same,
        lower,
        tie,
        nan,
        take0,
        take,
        v,
        i,
    ] = std::array::from_fn(|_| f.region_name());
    let kind = if value.is_float() { "FLOAT" } else { "SIGNED" };
    let cmp = |dir: &str, l: &str, r: &str, out: &str, t: &str, k: &str| {
        format!(
            "        {out} = \"stablehlo.compare\"({l}, {r}) {{comparison_direction = #stablehlo<comparison_direction {dir}>, compare_type = #stablehlo<comparison_type {k}>}} : ({t}, {t}) -> {tb}\n"
        )
    };
    let logic = |name: &str, l: &str, r: &str, out: &str| {
        format!("        {out} = \"stablehlo.{name}\"({l}, {r}) : ({tb}, {tb}) -> {tb}\n")
    };
    let mut body = format!("      ^bb0({a}: {tv}, {ai}: {ti}, {b}: {tv}, {bi}: {ti}):\n");
    body += &cmp(direction, &a, &b, &better, &tv, kind);
    body += &cmp("EQ", &a, &b, &same, &tv, kind);
    body += &cmp("LT", &ai, &bi, &lower, &ti, "SIGNED");
    body += &cmp("NE", &a, &a, &nan, &tv, kind);
    body += &logic("and", &same, &lower, &tie);
    body += &logic("or", &better, &tie, &take0);
    body += &logic("or", &take0, &nan, &take);
    body += &format!(
        "        {v} = \"stablehlo.select\"({take}, {a}, {b}) : ({tb}, {tv}, {tv}) -> {tv}\n"
    );
    body += &format!(
        "        {i} = \"stablehlo.select\"({take}, {ai}, {bi}) : ({tb}, {ti}, {ti}) -> {ti}\n"
    );
    body += &format!("        \"stablehlo.return\"({v}, {i}) : ({tv}, {ti}) -> ()\n");
    body
}
