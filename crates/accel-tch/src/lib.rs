//! ember's LibTorch accelerators: burn-tch under autodiff, on PyTorch's own kernels.
//!
//! Two names, one per kind of hardware, beside the burn-native accelerators of that hardware:
//! `tch-cpu` (LibTorch on the host CPU, next to `cpu` on burn-flex) and `tch-cuda` (LibTorch on
//! NVIDIA GPUs, next to `cuda` on burn-cuda). `auto` never picks them; `gpu` picks `tch-cuda`
//! only when no burn-native GPU accelerator is available. Building this crate needs a LibTorch
//! (docs/libtorch.md); a binary that includes it needs LibTorch's libraries at run time.
//!
//! LibTorch sizes its intra-op thread pool to the machine's cores; ember sets it to this
//! process's share instead (see [`configure_threads`]).

use std::sync::Once;

use burn_autodiff::Autodiff;
use burn_tch::{LibTorch, LibTorchDevice};
use cudarc::driver::{CudaContext, sys};
use ember_core::{Accelerator, AcceleratorKind, DeviceStats, Precision};

/// The backend LibTorch runs train on (f32 by default; the precision sets the float type).
pub type TchBackend = Autodiff<LibTorch>;

/// LibTorch on the host CPU.
pub struct TchCpuAccelerator;

/// LibTorch on NVIDIA GPUs through CUDA.
pub struct TchCudaAccelerator;

/// The variable LibTorch (through OpenMP) reads its thread count from; when a user sets it,
/// ember leaves LibTorch's threads alone.
const TORCH_THREADS_VAR: &str = "OMP_NUM_THREADS";

/// ember's per-process compute threads: the launcher gives each local rank its share of the
/// cores in it (a user may set it too).
const EMBER_THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// The intra-op threads LibTorch should use, from the variables of this process: `None` when
/// the user set `OMP_NUM_THREADS` (LibTorch honours it), else `RAYON_NUM_THREADS` (the
/// launcher's per-rank share) when it is a positive number, else every core.
pub fn threads_for(omp: Option<&str>, rayon: Option<&str>, cores: usize) -> Option<usize> {
    if omp.is_some() {
        return None;
    }
    let share = rayon.and_then(|v| v.trim().parse::<usize>().ok());
    Some(share.filter(|&n| n > 0).unwrap_or(cores).max(1))
}

/// Sets LibTorch's intra-op threads once per process (see [`threads_for`]); later calls do
/// nothing. LibTorch's default on a machine shared by ranks or busy with other work leaves
/// threads spinning for cores that are taken (steps ~20x slower on a busy 2-core machine).
pub fn configure_threads() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let var = |name| std::env::var(name).ok();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let omp = var(TORCH_THREADS_VAR);
        match threads_for(omp.as_deref(), var(EMBER_THREADS_VAR).as_deref(), cores) {
            Some(threads) => {
                tch::set_num_threads(i32::try_from(threads).unwrap_or(i32::MAX));
                tracing::debug!(target: "ember", "LibTorch intra-op threads: {threads}");
            }
            None => tracing::debug!(
                target: "ember",
                "LibTorch intra-op threads left to OMP_NUM_THREADS={}",
                omp.unwrap_or_default()
            ),
        }
    });
}

/// Number of CUDA devices LibTorch can use; 0 without a driver or GPU. Asking never creates a
/// CUDA device (which aborts the process where no driver is present).
pub fn cuda_device_count() -> usize {
    if !tch::utils::has_cuda() {
        return 0;
    }
    usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
}

impl Accelerator for TchCpuAccelerator {
    type Backend = TchBackend;

    fn name() -> &'static str {
        "tch-cpu"
    }

    fn description() -> &'static str {
        "host CPU through LibTorch (burn-tch); devices = number of processes"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Cpu
    }

    fn is_available() -> bool {
        true
    }

    fn auto_device_count() -> usize {
        1
    }

    fn parallel_devices(ids: &[usize]) -> Vec<LibTorchDevice> {
        configure_threads();
        ids.iter().map(|_| LibTorchDevice::Cpu).collect()
    }

    /// LibTorch's CPU kernels compute in every float type; 16-mixed becomes bf16-mixed on a
    /// CPU (the connector's rule).
    fn precisions() -> &'static [Precision] {
        &[
            Precision::F32True,
            Precision::F64True,
            Precision::F16True,
            Precision::Bf16True,
            Precision::Bf16Mixed,
        ]
    }

    fn deterministic() -> Result<(), String> {
        // LibTorch's CPU kernels split work statically by thread count (no atomics, no work
        // stealing), so a run repeats bitwise with the same number of threads.
        Ok(())
    }

    fn device_stats(_device: &LibTorchDevice) -> DeviceStats {
        ember_accel_cpu::process_stats()
    }
}

impl Accelerator for TchCudaAccelerator {
    type Backend = TchBackend;

    fn name() -> &'static str {
        "tch-cuda"
    }

    fn description() -> &'static str {
        "NVIDIA GPUs through LibTorch (burn-tch)"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Gpu
    }

    fn is_available() -> bool {
        cuda_device_count() > 0
    }

    fn auto_device_count() -> usize {
        cuda_device_count()
    }

    fn parallel_devices(ids: &[usize]) -> Vec<LibTorchDevice> {
        configure_threads();
        ids.iter()
            .map(|&index| LibTorchDevice::Cuda(index))
            .collect()
    }

    /// LibTorch's CUDA kernels compute in every float type; 16-mixed uses dynamic loss
    /// scaling.
    fn precisions() -> &'static [Precision] {
        &[
            Precision::F32True,
            Precision::F64True,
            Precision::F16True,
            Precision::Bf16True,
            Precision::F16Mixed,
            Precision::Bf16Mixed,
        ]
    }

    fn deterministic() -> Result<(), String> {
        Err(
            "LibTorch's CUDA kernels (cuBLAS, cuDNN, atomics in reductions and scatters) are \
             not bitwise repeatable unless torch's deterministic mode is on, which burn-tch \
             0.21 does not expose"
                .into(),
        )
    }

    fn device_stats(device: &LibTorchDevice) -> DeviceStats {
        let mut stats = DeviceStats::new();
        if let LibTorchDevice::Cuda(index) = *device
            && let Some((free, total)) = memory_info(index)
        {
            stats.insert("memory_used_bytes".into(), (total - free) as f64);
            stats.insert("memory_total_bytes".into(), total as f64);
        }
        stats
    }
}

/// Free and total memory of CUDA device `index`, through the driver; `None` when unavailable.
fn memory_info(index: usize) -> Option<(usize, usize)> {
    // SAFETY: only tries to open the driver library; no symbol is called.
    if index >= cuda_device_count() || !unsafe { sys::is_culib_present() } {
        return None;
    }
    CudaContext::new(index).ok()?.mem_get_info().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_follow_the_users_choice_then_the_launchers_share_then_the_cores() {
        assert_eq!(threads_for(Some("3"), Some("1"), 8), None);
        assert_eq!(threads_for(None, Some("2"), 8), Some(2));
        assert_eq!(threads_for(None, Some("0"), 8), Some(8));
        assert_eq!(threads_for(None, Some("many"), 8), Some(8));
        assert_eq!(threads_for(None, None, 4), Some(4));
        assert_eq!(threads_for(None, None, 0), Some(1));
    }

    #[test]
    fn cuda_probing_never_aborts() {
        let count = cuda_device_count();
        assert_eq!(TchCudaAccelerator::is_available(), count > 0);
        if count == 0 {
            eprintln!("skip: no CUDA device here; checked only that probing reports none");
            assert!(TchCudaAccelerator::device_stats(&LibTorchDevice::Cuda(0)).is_empty());
        } else {
            let stats = TchCudaAccelerator::device_stats(&LibTorchDevice::Cuda(0));
            assert!(stats["memory_total_bytes"] > 0.0);
        }
    }
}
