//! The dtype side of a precision: which float type tensors on the device are created in.
//!
//! burn 0.21 keeps a default float dtype per device (set once, before the first tensor on it);
//! `Tensor::from_data` and every module initialiser create floats in it, and burn-flex runs
//! F64, F16 and BF16 kernels at run time. A "true" precision is therefore one backend type
//! plus the device's default dtype, set when the Trainer is made and before the model is.

use anyhow::bail;
use burn::tensor::backend::{Backend, set_default_float_dtype};
use burn::tensor::{FloatDType, get_device_settings};

use crate::precision::Precision;

/// The float type a true precision computes in; `None` for the mixed ones.
pub fn true_dtype(precision: Precision) -> Option<FloatDType> {
    match precision {
        Precision::F32True => Some(FloatDType::F32),
        Precision::F64True => Some(FloatDType::F64),
        Precision::F16True => Some(FloatDType::F16),
        Precision::Bf16True => Some(FloatDType::BF16),
        Precision::F16Mixed | Precision::Bf16Mixed => None,
    }
}

/// Makes `precision`'s float type the default of `device`. It fails when the precision is a
/// mixed one (not built yet), when the backend lacks the type, or when tensors already exist
/// on the device in another type (a process trains in one float type per device).
pub fn apply<B: Backend>(device: &B::Device, precision: Precision) -> anyhow::Result<()> {
    let Some(dtype) = true_dtype(precision) else {
        bail!("precision {precision} (f32 master weights, low-precision compute) is not built yet");
    };
    match set_default_float_dtype::<B>(device, dtype) {
        Ok(()) => Ok(()),
        Err(error) => {
            let current = get_device_settings::<B>(device).float_dtype;
            if current == dtype {
                return Ok(());
            }
            bail!(
                "precision {precision} needs {dtype:?} tensors, but the device already holds {current:?} ones ({error}); \
                 a process trains in one float type per device, so build the Trainer before any tensor"
            )
        }
    }
}
