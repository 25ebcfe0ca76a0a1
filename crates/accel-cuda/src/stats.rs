//! Device statistics for the DeviceStatsMonitor: NVML's figures (utilisation, memory,
//! temperature, power), with the CUDA driver's memory figures where NVML cannot be loaded.
//!
//! NVML (`libnvidia-ml.so.1`, part of the NVIDIA driver) is loaded at run time by nvml-wrapper,
//! once per process. CUDA and NVML may number devices differently (`CUDA_VISIBLE_DEVICES`,
//! PCI order), so a CUDA device is found in NVML by its UUID.

use std::sync::OnceLock;

use cudarc::driver::CudaContext;
use ember_core::DeviceStats;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

/// NVML, initialised on first use; `None` where it cannot be loaded.
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::init().ok()).as_ref()
}

/// The figures of CUDA device `index`; empty where neither NVML nor the driver answers.
pub fn device_stats(index: usize) -> DeviceStats {
    let mut stats = DeviceStats::new();
    let Some(context) = crate::memory_context(index) else {
        return stats;
    };
    if let Some(nvml) = nvml()
        && nvml_stats(nvml, &context, &mut stats)
    {
        return stats;
    }
    if let Ok((free, total)) = context.mem_get_info() {
        stats.insert("memory_used_bytes".into(), (total - free) as f64);
        stats.insert("memory_total_bytes".into(), total as f64);
    }
    stats
}

/// Adds NVML's figures for the device of `context`; false when NVML does not know it.
fn nvml_stats(nvml: &Nvml, context: &CudaContext, stats: &mut DeviceStats) -> bool {
    let Some(device) = context
        .uuid()
        .ok()
        .and_then(|uuid| nvml.device_by_uuid(nvml_uuid(&uuid.bytes)).ok())
    else {
        return false;
    };
    let mut put = |key: &str, value: Option<f64>| {
        if let Some(value) = value {
            stats.insert(key.into(), value);
        }
    };
    let memory = device.memory_info().ok();
    put("memory_used_bytes", memory.as_ref().map(|m| m.used as f64));
    put(
        "memory_total_bytes",
        memory.as_ref().map(|m| m.total as f64),
    );
    let utilization = device.utilization_rates().ok();
    put(
        "utilization_gpu_percent",
        utilization.as_ref().map(|u| f64::from(u.gpu)),
    );
    put(
        "utilization_memory_percent",
        utilization.as_ref().map(|u| f64::from(u.memory)),
    );
    let temperature = device.temperature(TemperatureSensor::Gpu).ok();
    put("temperature_celsius", temperature.map(f64::from));
    put(
        "power_watts",
        device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
    );
    true
}

/// NVML's spelling of a CUDA device UUID: `GPU-` and 8-4-4-4-12 hex digits.
fn nvml_uuid(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_spelled_as_nvml_spells_them() {
        let bytes: [std::ffi::c_char; 16] = std::array::from_fn(|i| (i * 17) as u8 as _);
        assert_eq!(
            nvml_uuid(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    #[test]
    fn stats_are_empty_or_nvmls_without_panicking() {
        let stats = device_stats(0);
        if crate::cuda_device_count() == 0 {
            eprintln!("skip: no CUDA device here; checked only that stats are empty");
            assert!(stats.is_empty(), "{stats:?}");
        } else {
            assert!(stats["memory_total_bytes"] > 0.0, "{stats:?}");
            if nvml().is_some() {
                assert!(stats.contains_key("utilization_gpu_percent"), "{stats:?}");
            }
        }
    }
}
