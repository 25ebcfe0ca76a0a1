//! burn dtypes as MLIR element types and literals.

use burn_backend::DType;

/// The MLIR element type of `dtype` (bools are `i1`).
pub fn mlir_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F64 => "f64",
        DType::F32 | DType::Flex32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U64 => "ui64",
        DType::U32 => "ui32",
        DType::U16 => "ui16",
        DType::U8 => "ui8",
        DType::Bool(_) => "i1",
        DType::QFloat(_) => "!quantized",
    }
}

/// `tensor<2x3xf32>`, or `tensor<f32>` for a 0-d tensor.
pub fn tensor_type(shape: &[usize], dtype: DType) -> String {
    let mut s = String::from("tensor<");
    for d in shape {
        s.push_str(&d.to_string());
        s.push('x');
    }
    s.push_str(mlir_type(dtype));
    s.push('>');
    s
}

/// A literal of `dtype` for `dense<...>`: floats as their exact bit pattern in hex (so
/// infinities, NaN and every rounding survive), integers in decimal, bools as true/false.
pub fn literal(value: f64, dtype: DType) -> String {
    match dtype {
        DType::F64 => format!("0x{:016X}", value.to_bits()),
        DType::F32 | DType::Flex32 => format!("0x{:08X}", (value as f32).to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(value).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(value).to_bits()),
        DType::Bool(_) => (value != 0.0).to_string(),
        DType::U64 | DType::U32 | DType::U16 | DType::U8 => (value as u64).to_string(),
        _ => (value as i64).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_literals() {
        assert_eq!(tensor_type(&[2, 3], DType::F32), "tensor<2x3xf32>");
        assert_eq!(tensor_type(&[], DType::BF16), "tensor<bf16>");
        assert_eq!(literal(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(literal(1.0, DType::BF16), "0x3F80");
        assert_eq!(literal(-3.0, DType::I32), "-3");
        assert_eq!(
            literal(1.0, DType::Bool(burn_backend::BoolStore::Native)),
            "true"
        );
    }
}
