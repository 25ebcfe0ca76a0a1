//! Thin safe bindings of our own over the PJRT C API (`include/pjrt_c_api.h`, 0.81), loaded at
//! run time with `libloading`: no build needs a plugin, libclang or protoc.

pub(crate) mod api;
mod client;
mod executable;
mod key_value;
pub mod plugin;
mod sys;

pub use api::{Api, PjrtError, Result};
pub use client::{Buffer, Client, ElementType, OptionValue, Running};
/// What [`Client::with_store`] takes (ember's host collectives serve one).
pub use ember_core::collective::KeyValueStore;
pub use executable::Executable;
