//! ember's XLA accelerator: burn models recorded lazily, compiled to StableHLO and run through
//! a PJRT plugin (XLA's CPU plugin here, XLA's CUDA plugin on a GPU, libtpu on a TPU VM).
//!
//! Layers, each depending only on those below it:
//! - [`pjrt`]: thin safe bindings over the PJRT C API, loaded at run time.
//! - [`hlo`]: burn-ir ops lowered to StableHLO text, op by op.
//! - [`backend`]: the lazy burn backend [`Xla`] that records, cuts, compiles once per program
//!   shape, and runs.
//! - [`accelerator`]: `xla`, ember's accelerator on that backend.

pub mod accelerator;
pub mod backend;
pub mod hlo;
pub mod pjrt;

pub use accelerator::{XlaAccelerator, XlaBackend};
pub use backend::{Xla, XlaDevice};
