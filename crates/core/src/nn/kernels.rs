//! Fused kernels an accelerator installs for the layers of [`crate::nn`], looked up by the
//! backend type a layer runs on.
//!
//! A model's layers are generic over the backend; the kernels are not. An accelerator installs
//! its kernels for its backend types when a Trainer is built on it
//! ([`Accelerator::install_kernels`](crate::Accelerator::install_kernels)); a layer then finds
//! them by its backend's type. Without one, or when a kernel declines an input, the layer runs
//! burn's composition of tensor ops.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// What a batch-norm kernel returns for one training step.
pub struct BatchNormStats<B: Backend> {
    /// The normalized, scaled and shifted input, `[batch, channels, rows]`.
    pub output: Tensor<B, 3>,
    /// Each channel's mean over the batch and rows, `[channels]`.
    pub mean: Tensor<B, 1>,
    /// Each channel's biased variance (mean squared deviation), `[channels]`.
    pub var: Tensor<B, 1>,
}

/// Batch normalization in training as one operation on backend `B`, differentiable with
/// respect to the input, `gamma` and `beta` when `B` records gradients.
pub trait BatchNormKernel<B: Backend>: Send + Sync + 'static {
    /// Normalizes `x` (`[batch, channels, rows]`) per channel by its batch statistics, then
    /// scales by `gamma` and shifts by `beta` (`[channels]`): `(x − mean) / sqrt(var +
    /// epsilon) · gamma + beta`. `None` when the kernel does not take this input (a dtype it
    /// lacks, say); the layer then composes burn's ops.
    fn train(
        &self,
        x: Tensor<B, 3>,
        gamma: Tensor<B, 1>,
        beta: Tensor<B, 1>,
        epsilon: f64,
    ) -> Option<BatchNormStats<B>>;
}

/// A fused layer norm over the last dimension on backend `B`, differentiable with respect to
/// the input, `gamma` and `beta` when `B` records gradients.
pub trait LayerNormKernel<B: Backend>: Send + Sync + 'static {
    /// Normalizes each row of `x` (`[rows, features]`) by its own mean and (biased) variance,
    /// then scales by `gamma` and shifts by `beta` (`[features]`): `(x − mean) / sqrt(var +
    /// epsilon) · gamma + beta`. `None` when the kernel does not take this input; the layer
    /// then runs burn's op.
    fn train(
        &self,
        x: Tensor<B, 2>,
        gamma: Tensor<B, 1>,
        beta: Option<Tensor<B, 1>>,
        epsilon: f64,
    ) -> Option<Tensor<B, 2>>;
}

/// Installed kernels, each an `Arc<K>` under the `TypeId` of `Arc<K>` (which names the kernel's
/// kind and its backend, e.g. `Arc<dyn BatchNormKernel<Autodiff<Flex>>>`).
type Table = RwLock<HashMap<TypeId, Box<dyn Any + Send + Sync>>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(Table::default)
}

pub(crate) fn install<K: ?Sized + Send + Sync + 'static>(kernel: Arc<K>) {
    let mut table = table().write().unwrap_or_else(|e| e.into_inner());
    table.insert(TypeId::of::<Arc<K>>(), Box::new(kernel));
}

pub(crate) fn installed<K: ?Sized + Send + Sync + 'static>() -> Option<Arc<K>> {
    let table = table().read().unwrap_or_else(|e| e.into_inner());
    let kernel = table.get(&TypeId::of::<Arc<K>>())?;
    kernel.downcast_ref::<Arc<K>>().cloned()
}

/// Makes `kernel` the batch-norm kernel of every [`BatchNorm`](super::BatchNorm) layer on
/// backend `B` in this process (replacing one installed before).
pub fn install_batch_norm<B: Backend>(kernel: impl BatchNormKernel<B>) {
    install::<dyn BatchNormKernel<B>>(Arc::new(kernel));
}

/// Makes `kernel` the layer-norm kernel of every [`LayerNorm`](super::LayerNorm) layer on
/// backend `B` in this process (replacing one installed before).
pub fn install_layer_norm<B: Backend>(kernel: impl LayerNormKernel<B>) {
    install::<dyn LayerNormKernel<B>>(Arc::new(kernel));
}

/// The batch-norm kernel installed for backend `B`, if any.
pub(super) fn batch_norm<B: Backend>() -> Option<Arc<dyn BatchNormKernel<B>>> {
    installed::<dyn BatchNormKernel<B>>()
}

/// The layer-norm kernel installed for backend `B`, if any.
pub(super) fn layer_norm<B: Backend>() -> Option<Arc<dyn LayerNormKernel<B>>> {
    installed::<dyn LayerNormKernel<B>>()
}
