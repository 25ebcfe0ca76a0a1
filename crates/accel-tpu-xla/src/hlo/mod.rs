//! The StableHLO emitter: a segment of burn-ir ops as one `func.func @main` in MLIR text.

pub mod func;
pub mod lower;
pub mod ops;
pub mod types;

pub use func::{Emitted, Function, Lifted, Scalars, Spmd, Unsupported, Val};
