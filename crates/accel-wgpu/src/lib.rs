//! ember's WGPU accelerator: burn-wgpu (Vulkan, Metal, DX12) under autodiff.
//!
//! Devices are the adapters wgpu enumerates for the platform's graphics API, in wgpu's order.
//! Software rasterizers (mesa's lavapipe/llvmpipe report themselves as CPU adapters) are left
//! out, so that `accelerator=auto` on a machine with no GPU still picks cpu; set
//! `EMBER_WGPU_SOFTWARE=1` to count them (tests do, to run wgpu on CI machines).

use std::sync::OnceLock;

use burn_autodiff::Autodiff;
use burn_wgpu::graphics::{AutoGraphicsApi, GraphicsApi};
use burn_wgpu::{Wgpu, WgpuDevice};
use ember_core::{Accelerator, AcceleratorKind, DeviceStats, Precision};

/// The backend WGPU runs train on.
pub type WgpuBackend = Autodiff<Wgpu>;

/// The variable that makes software adapters count as devices.
pub const SOFTWARE_VAR: &str = "EMBER_WGPU_SOFTWARE";

/// GPUs through wgpu.
pub struct WgpuAccelerator;

/// The adapters ember treats as devices: (device type, name), in wgpu's order. Enumerated
/// once per process: each enumeration makes the Vulkan loader probe the window systems.
pub fn adapters() -> Vec<(wgpu::DeviceType, String)> {
    static ADAPTERS: OnceLock<Vec<(wgpu::DeviceType, String)>> = OnceLock::new();
    ADAPTERS
        .get_or_init(|| ember_core::quiet::stderr(enumerate))
        .clone()
}

fn enumerate() -> Vec<(wgpu::DeviceType, String)> {
    let software = std::env::var(SOFTWARE_VAR).is_ok_and(|v| v == "1");
    let backend = AutoGraphicsApi::backend();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: backend.into(),
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    futures_lite::future::block_on(instance.enumerate_adapters(backend.into()))
        .into_iter()
        .map(|a| a.get_info())
        .filter(|info| software || info.device_type != wgpu::DeviceType::Cpu)
        .map(|info| (info.device_type, info.name))
        .collect()
}

/// The burn device for each adapter: its type and its index among adapters of that type.
fn devices_of(adapters: &[(wgpu::DeviceType, String)]) -> Vec<WgpuDevice> {
    adapters
        .iter()
        .enumerate()
        .map(|(i, (kind, _))| {
            let nth = adapters[..i].iter().filter(|(k, _)| k == kind).count();
            match kind {
                wgpu::DeviceType::DiscreteGpu => WgpuDevice::DiscreteGpu(nth),
                wgpu::DeviceType::IntegratedGpu => WgpuDevice::IntegratedGpu(nth),
                wgpu::DeviceType::VirtualGpu => WgpuDevice::VirtualGpu(nth),
                wgpu::DeviceType::Cpu => WgpuDevice::Cpu,
                wgpu::DeviceType::Other => WgpuDevice::DefaultDevice,
            }
        })
        .collect()
}

impl Accelerator for WgpuAccelerator {
    type Backend = WgpuBackend;

    fn name() -> &'static str {
        "wgpu"
    }

    fn description() -> &'static str {
        "GPUs through wgpu: Vulkan, Metal or DX12 (burn-wgpu)"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Gpu
    }

    fn auto_priority() -> Option<u32> {
        Some(10)
    }

    fn is_available() -> bool {
        !adapters().is_empty()
    }

    fn auto_device_count() -> usize {
        adapters().len()
    }

    fn parallel_devices(ids: &[usize]) -> Vec<WgpuDevice> {
        let all = devices_of(&adapters());
        ids.iter()
            .map(|&id| all.get(id).cloned().unwrap_or(WgpuDevice::DefaultDevice))
            .collect()
    }

    /// burn-wgpu computes in F16 at run time (WGSL's 16-bit floats; lavapipe has them too), so
    /// 16-true and 16-mixed (f32 master weights, dynamic loss scaling) run; WGSL has no bf16, and
    /// f64 shaders are an optional extension burn-wgpu does not use, so those are refused.
    fn precisions() -> &'static [Precision] {
        &[Precision::F32True, Precision::F16True, Precision::F16Mixed]
    }

    fn deterministic() -> Result<(), String> {
        Err(
            "burn-wgpu 0.21 has no switch that fixes kernel selection and the order of parallel \
             reductions, so bitwise repeatability is not guaranteed"
                .into(),
        )
    }

    fn device_stats(device: &WgpuDevice) -> DeviceStats {
        let mut stats = DeviceStats::new();
        let index = devices_of(&adapters()).iter().position(|d| d == device);
        stats.insert("adapter_index".into(), index.map_or(-1.0, |i| i as f64));
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_numbered_within_their_type() {
        let list = [
            (wgpu::DeviceType::IntegratedGpu, "a".to_owned()),
            (wgpu::DeviceType::DiscreteGpu, "b".to_owned()),
            (wgpu::DeviceType::DiscreteGpu, "c".to_owned()),
            (wgpu::DeviceType::Cpu, "lavapipe".to_owned()),
        ];
        assert_eq!(
            devices_of(&list),
            [
                WgpuDevice::IntegratedGpu(0),
                WgpuDevice::DiscreteGpu(0),
                WgpuDevice::DiscreteGpu(1),
                WgpuDevice::Cpu
            ]
        );
    }

    #[test]
    fn probing_never_panics() {
        let n = WgpuAccelerator::auto_device_count();
        assert_eq!(WgpuAccelerator::is_available(), n > 0);
        if n == 0 {
            eprintln!("skip: no wgpu adapter here; checked only that probing reports none");
        }
    }
}
