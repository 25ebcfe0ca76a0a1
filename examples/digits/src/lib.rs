//! The digits example: an MLP (64-256-256-10, ReLU) trained with Adam on 8×8 handwritten digits.

pub mod data;
pub mod job;
pub mod model;
pub mod train;
