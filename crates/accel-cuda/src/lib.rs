//! ember's CUDA accelerator: burn-cuda under autodiff.
//!
//! Availability and device count come from the CUDA driver (`libcuda`), loaded at run time
//! through cudarc, so this crate builds without CUDA and a binary that includes it runs on a
//! machine without a GPU: there `is_available()` is simply false. `ddp` ranks sum gradients
//! on their GPUs through NCCL ([`nccl`]); device statistics come from NVML ([`stats`]). Both
//! libraries are loaded at run time too.

pub mod nccl;
pub mod stats;

use std::rc::Rc;

use burn_autodiff::Autodiff;
use burn_cuda::{Cuda, CudaDevice};
use cudarc::driver::{CudaContext, result, sys};
use ember_core::collective::Collective;
use ember_core::plugins::device_reduce::DeviceCollective;
use ember_core::{Accelerator, AcceleratorKind, DeviceStats, Precision};

/// The backend CUDA runs train on.
pub type CudaBackend = Autodiff<Cuda>;

/// NVIDIA GPUs through CUDA.
pub struct CudaAccelerator;

/// Number of CUDA devices the driver reports; 0 when the driver is missing or fails.
pub fn cuda_device_count() -> usize {
    // SAFETY: only tries to open the driver library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return 0;
    }
    if result::init().is_err() {
        return 0;
    }
    result::device::get_count().map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

impl Accelerator for CudaAccelerator {
    type Backend = CudaBackend;

    fn name() -> &'static str {
        "cuda"
    }

    fn description() -> &'static str {
        "NVIDIA GPUs through CUDA (burn-cuda)"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Gpu
    }

    fn auto_priority() -> Option<u32> {
        Some(20)
    }

    fn is_available() -> bool {
        cuda_device_count() > 0
    }

    fn auto_device_count() -> usize {
        cuda_device_count()
    }

    fn parallel_devices(ids: &[usize]) -> Vec<CudaDevice> {
        ids.iter().map(|&index| CudaDevice::new(index)).collect()
    }

    /// burn-cuda computes in F16 and BF16 at run time (cubecl registers both for every CUDA
    /// device), so 16-true, bf16-true and both mixed precisions run; 16-mixed uses dynamic loss
    /// scaling. cubecl-cuda 0.10 leaves F64 out of the types it registers (its matmul failed
    /// with `CUDA_ERROR_INVALID_VALUE`), so 64-true is refused at plan time.
    fn precisions() -> &'static [Precision] {
        &[
            Precision::F32True,
            Precision::F16True,
            Precision::Bf16True,
            Precision::F16Mixed,
            Precision::Bf16Mixed,
        ]
    }

    fn deterministic() -> Result<(), String> {
        Err(
            "burn-cuda 0.21 has no switch that fixes kernel selection and the order of parallel \
             reductions, so bitwise repeatability is not guaranteed"
                .into(),
        )
    }

    /// NVML's utilisation, memory, temperature and power (the driver's memory figures
    /// where NVML cannot be loaded).
    fn device_stats(device: &CudaDevice) -> DeviceStats {
        stats::device_stats(device.index)
    }

    fn device_collective_name() -> Option<&'static str> {
        Some(nccl::NCCL)
    }

    fn device_collective(
        host: Rc<dyn Collective>,
        device: &CudaDevice,
    ) -> anyhow::Result<Box<dyn DeviceCollective>> {
        Ok(Box::new(nccl::NcclCollective::new(host.as_ref(), device)?))
    }
}

/// The driver context of device `index` (its primary context, retained); `None` when the
/// driver or the device is missing.
fn memory_context(index: usize) -> Option<std::sync::Arc<CudaContext>> {
    if index >= cuda_device_count() {
        return None;
    }
    CudaContext::new(index).ok()
}

/// The name of device `index` (e.g. `NVIDIA H100 80GB HBM3`); `None` when unavailable.
pub fn device_name(index: usize) -> Option<String> {
    memory_context(index)?.name().ok()
}

/// Free and total memory of device `index`, through the driver; `None` when unavailable.
pub fn memory_info(index: usize) -> Option<(usize, usize)> {
    memory_context(index)?.mem_get_info().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_never_panics_and_agrees_with_itself() {
        let count = cuda_device_count();
        assert_eq!(CudaAccelerator::is_available(), count > 0);
        if count == 0 {
            eprintln!(
                "skip: no CUDA driver or device here; checked only that probing reports none"
            );
            assert!(memory_info(0).is_none());
        } else {
            let stats = CudaAccelerator::device_stats(&CudaDevice::new(0));
            assert!(stats["memory_total_bytes"] > 0.0);
        }
    }
}
