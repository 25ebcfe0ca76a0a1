//! The lazy xla backend: burn's ops recorded through `burn-router`, cut into segments where a
//! value is read, each compiled once per program shape and run through PJRT.

mod channel;
mod client;
mod data;
mod device;
pub mod runtime;
mod segment;
mod signature;
mod template;

pub use channel::XlaChannel;
pub use client::XlaClient;
pub use device::XlaDevice;
pub use runtime::{CacheStats, stats};

/// burn's backend on xla devices.
pub type Xla = burn_router::BackendRouter<XlaChannel>;
