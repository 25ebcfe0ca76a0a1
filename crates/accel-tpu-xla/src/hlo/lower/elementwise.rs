//! Float-only, int-only and bool-only ops: math functions, matmul, bitwise and logic.

use burn_backend::DType;
use burn_ir::{BoolOperationIr, FloatOperationIr, IntOperationIr, MatmulOpIr, UnaryOpIr};

use crate::hlo::func::{Function, Unsupported, Val};
use crate::hlo::lower::numeric::{binary, scalar};

/// Lowers one float op.
pub fn float(f: &mut Function, op: &FloatOperationIr) -> Result<(), Unsupported> {
    use FloatOperationIr as F;
    match op {
        F::Exp(o) => unary(f, o, "stablehlo.exponential"),
        F::Log(o) => unary(f, o, "stablehlo.log"),
        F::Log1p(o) => unary(f, o, "stablehlo.log_plus_one"),
        F::Erf(o) => unary(f, o, "chlo.erf"),
        F::Sqrt(o) => unary(f, o, "stablehlo.sqrt"),
        F::Cos(o) => unary(f, o, "stablehlo.cosine"),
        F::Sin(o) => unary(f, o, "stablehlo.sine"),
        F::Tanh(o) => unary(f, o, "stablehlo.tanh"),
        F::Tan(o) => unary(f, o, "chlo.tan"),
        F::Cosh(o) => unary(f, o, "chlo.cosh"),
        F::Sinh(o) => unary(f, o, "chlo.sinh"),
        F::ArcCos(o) => unary(f, o, "chlo.acos"),
        F::ArcCosh(o) => unary(f, o, "chlo.acosh"),
        F::ArcSin(o) => unary(f, o, "chlo.asin"),
        F::ArcSinh(o) => unary(f, o, "chlo.asinh"),
        F::ArcTan(o) => unary(f, o, "chlo.atan"),
        F::ArcTanh(o) => unary(f, o, "chlo.atanh"),
        F::Round(o) => unary(f, o, "stablehlo.round_nearest_even"),
        F::Floor(o) => unary(f, o, "stablehlo.floor"),
        F::Ceil(o) => unary(f, o, "stablehlo.ceil"),
        F::Trunc(o) => {
            let x = f.get(&o.input);
            let zero = f.constant(0.0, x.dtype, &x.shape);
            let neg = f.compare("LT", &x, &zero);
            let up = f.unary("stablehlo.ceil", &x);
            let down = f.unary("stablehlo.floor", &x);
            let v = f.select(&neg, &up, &down);
            f.set(&o.out, v);
        }
        F::Recip(o) => {
            let x = f.get(&o.input);
            let one = f.constant(1.0, x.dtype, &x.shape);
            let v = f.binary("stablehlo.divide", &one, &x);
            f.set(&o.out, v);
        }
        F::IsNan(o) => {
            let x = f.get(&o.input);
            let v = f.compare("NE", &x, &x);
            f.set(&o.out, v);
        }
        F::IsInf(o) => {
            let x = f.get(&o.input);
            let a = f.unary("stablehlo.abs", &x);
            let inf = f.constant(f64::INFINITY, x.dtype, &x.shape);
            let v = f.compare("EQ", &a, &inf);
            f.set(&o.out, v);
        }
        F::PowfScalar(o) => scalar(f, o, "stablehlo.power"),
        F::Powf(o) | F::ArcTan2(o) => {
            let name = if matches!(op, F::Powf(_)) {
                "stablehlo.power"
            } else {
                "stablehlo.atan2"
            };
            binary(f, o, name);
        }
        F::IntoInt(o) => {
            let x = f.get(&o.input);
            let v = f.convert(&x, o.out.dtype);
            f.set(&o.out, v);
        }
        F::Matmul(o) => matmul(f, o),
        F::Random(_) => unreachable!("random tensors are made on the host when recorded"),
        F::Cross(_) => return Err(Unsupported("float cross".into())),
        F::Quantize(_) | F::Dequantize(_) => return Err(Unsupported("quantization".into())),
        F::GridSample2d(_) => return Err(Unsupported("grid_sample_2d".into())),
    }
    Ok(())
}

/// Lowers one int op.
pub fn int(f: &mut Function, op: &IntOperationIr) -> Result<(), Unsupported> {
    use IntOperationIr as I;
    match op {
        I::IntoFloat(o) => {
            let x = f.get(&o.input);
            let v = f.convert(&x, o.out.dtype);
            f.set(&o.out, v);
        }
        I::BitwiseAnd(o) => binary(f, o, "stablehlo.and"),
        I::BitwiseOr(o) => binary(f, o, "stablehlo.or"),
        I::BitwiseXor(o) => binary(f, o, "stablehlo.xor"),
        I::BitwiseLeftShift(o) => binary(f, o, "stablehlo.shift_left"),
        I::BitwiseRightShift(o) => binary(f, o, "stablehlo.shift_right_arithmetic"),
        I::BitwiseAndScalar(o) => scalar(f, o, "stablehlo.and"),
        I::BitwiseOrScalar(o) => scalar(f, o, "stablehlo.or"),
        I::BitwiseXorScalar(o) => scalar(f, o, "stablehlo.xor"),
        I::BitwiseLeftShiftScalar(o) => scalar(f, o, "stablehlo.shift_left"),
        I::BitwiseRightShiftScalar(o) => scalar(f, o, "stablehlo.shift_right_arithmetic"),
        I::BitwiseNot(o) => unary(f, o, "stablehlo.not"),
        I::Matmul(o) => matmul(f, o),
    }
    Ok(())
}

/// Lowers one bool op.
pub fn bool(f: &mut Function, op: &BoolOperationIr) -> Result<(), Unsupported> {
    use BoolOperationIr as B;
    match op {
        B::IntoFloat(o) | B::IntoInt(o) => {
            let x = f.get(&o.input);
            let v = f.convert(&x, o.out.dtype);
            f.set(&o.out, v);
        }
        B::Not(o) => unary(f, o, "stablehlo.not"),
        B::And(o) | B::Or(o) => {
            let name = if matches!(op, B::And(_)) {
                "stablehlo.and"
            } else {
                "stablehlo.or"
            };
            binary(f, o, name);
        }
    }
    Ok(())
}

fn unary(f: &mut Function, o: &UnaryOpIr, name: &str) {
    let x = f.get(&o.input);
    let v = f.unary(name, &x);
    f.set(&o.out, v);
}

fn matmul(f: &mut Function, o: &MatmulOpIr) {
    let a = f.get(&o.lhs);
    let b = f.get(&o.rhs);
    let v = batched_matmul(f, &a, &b, o.out.shape.as_slice(), o.out.dtype);
    f.set(&o.out, v);
}

/// `a @ b` over the last two dims, the leading (batch) dims broadcast to `out`'s.
pub fn batched_matmul(f: &mut Function, a: &Val, b: &Val, out: &[usize], dtype: DType) -> Val {
    let rank = out.len();
    let batch = &out[..rank - 2];
    let mut a_shape = batch.to_vec();
    a_shape.extend_from_slice(&a.shape[a.rank() - 2..]);
    let mut b_shape = batch.to_vec();
    b_shape.extend_from_slice(&b.shape[b.rank() - 2..]);
    let a = f.broadcast_to(a, &a_shape);
    let b = f.broadcast_to(b, &b_shape);
    dot(f, &a, &b, rank - 2, dtype)
}

/// `dot_general` contracting `a`'s last dim with `b`'s second-to-last, over `batch` leading
/// batch dims.
pub fn dot(f: &mut Function, a: &Val, b: &Val, batch: usize, dtype: DType) -> Val {
    let batch_dims: Vec<String> = (0..batch).map(|d| d.to_string()).collect();
    let batch_dims = batch_dims.join(", ");
    let mut shape: Vec<usize> = a.shape[..batch].to_vec();
    shape.push(a.shape[a.rank() - 2]);
    shape.push(b.shape[b.rank() - 1]);
    let attrs = format!(
        "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{batch_dims}], rhs_batching_dimensions = [{batch_dims}], lhs_contracting_dimensions = [{}], rhs_contracting_dimensions = [{}]>",
        a.rank() - 1,
        b.rank() - 2
    );
    f.op("stablehlo.dot_general", &[a, b], &attrs, &shape, dtype)
}
