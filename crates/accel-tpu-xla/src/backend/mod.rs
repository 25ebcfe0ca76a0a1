//! The lazy xla backend: burn's ops recorded through `burn-router`, cut into segments where a
//! value is read or the next batch is made, each compiled once per program shape and started
//! through PJRT without waiting for it.

mod channel;
mod client;
mod clients;
mod data;
mod device;
mod donation;
mod in_flight;
mod rows;
pub mod runtime;
mod segment;
mod signature;
mod template;

pub use channel::XlaChannel;
pub use client::XlaClient;
pub use clients::Placement;
pub use device::XlaDevice;
pub use runtime::{CacheStats, stats};

/// burn's backend on xla devices.
pub type Xla = burn_router::BackendRouter<XlaChannel>;

/// Marks the end of a step on `device` (PyTorch/XLA's `mark_step`): what was recorded is cut
/// and started without waiting, so the host records the next step while the device runs this
/// one; a later read waits for it. The Trainer needs no call: a batch its loaders make starts
/// what the previous one recorded ([`batch_scope`]). A hand-written loop that reads nothing each step calls it
/// after the optimizer step (one that reads its loss is cut there already).
pub fn mark_step(device: &XlaDevice) {
    burn_router::get_client::<XlaChannel>(device).mark_step();
}

/// Tells `device` that a batch of `rows` items is being made (`Some`) or was made (`None`): on
/// a device spanning several, a tensor of that many rows uploaded in between is the batch's,
/// split by rows over them, each given only its rows; and a new batch starts what the last one
/// recorded (a whole step, as [`mark_step`]). The Trainer does this around every batch its
/// loaders make (`Accelerator::batch_scope`); a hand-written loop uses [`making_batch`].
pub fn batch_scope(device: &XlaDevice, rows: Option<usize>) {
    burn_router::get_client::<XlaChannel>(device).batch_scope(rows);
}

/// Runs `make`, which uploads a batch of `rows` items to `device`, inside [`batch_scope`].
pub fn making_batch<T>(device: &XlaDevice, rows: usize, make: impl FnOnce() -> T) -> T {
    /// Ends the scope also when `make` panics.
    struct End<'a>(&'a XlaDevice);
    impl Drop for End<'_> {
        fn drop(&mut self) {
            batch_scope(self.0, None);
        }
    }
    batch_scope(device, Some(rows));
    let _end = End(device);
    make()
}

/// What each device of `tensor`'s xla device holds of it (see [`XlaDevice::spanning`]): the
/// whole tensor, the same on every device unless something is wrong, or its rows of a batch's.
pub fn on_each_device<const D: usize>(
    tensor: burn::tensor::Tensor<Xla, D>,
) -> Result<Vec<burn_backend::TensorData>, burn_backend::ExecutionError> {
    let primitive = tensor.into_primitive().tensor();
    let client = primitive.client.clone();
    client.read_each_device(&primitive.into_ir())
}
