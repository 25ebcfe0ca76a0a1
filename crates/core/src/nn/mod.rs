//! Layers of ember's own, for models whose layers burn composes from many tensor ops where an
//! accelerator has a fused kernel.
//!
//! [`BatchNorm`] and [`LayerNorm`] are burn's layers of those names (same fields, record,
//! configuration and results up to float rounding) whose training step runs as one kernel
//! forward and one backward where the accelerator installed them ([`kernels`]); elsewhere they
//! run burn's own ops.

mod batch_norm;
pub mod kernels;
mod layer_norm;
mod recompute;

pub use batch_norm::{BatchNorm, BatchNormConfig};
pub use kernels::{
    BatchNormKernel, BatchNormStats, LayerNormKernel, install_batch_norm, install_layer_norm,
};
pub use layer_norm::{LayerNorm, LayerNormConfig};
pub use recompute::{Recomputing, recompute};
