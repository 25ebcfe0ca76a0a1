//! ember's CPU accelerator: burn's Flex backend under autodiff.
//!
//! On a CPU, `devices` counts processes (ddp runs one per device id); every process uses the
//! one host device. Why Flex rather than NdArray: `docs/architecture.md` has the measurement.

use std::sync::{Mutex, OnceLock};

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember_core::{Accelerator, AcceleratorKind, DeviceStats, Precision};
use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System};

/// The backend CPU runs train on.
pub type CpuBackend = Autodiff<Flex>;

/// The host CPU.
pub struct CpuAccelerator;

impl Accelerator for CpuAccelerator {
    type Backend = CpuBackend;

    fn name() -> &'static str {
        "cpu"
    }

    fn description() -> &'static str {
        "host CPU (burn Flex backend); devices = number of processes"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Cpu
    }

    fn auto_priority() -> Option<u32> {
        Some(0)
    }

    fn is_available() -> bool {
        true
    }

    fn auto_device_count() -> usize {
        1
    }

    fn parallel_devices(ids: &[usize]) -> Vec<FlexDevice> {
        ids.iter().map(|_| FlexDevice).collect()
    }

    /// burn-flex computes in F32, F64, F16 and BF16 at run time; the Trainer makes the
    /// precision's type the device's default float type. 16-mixed becomes bf16-mixed on a CPU
    /// (the connector's rule), so loss scaling is never needed here.
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
        // burn-flex sums large tensors in rayon chunks and combines the partial sums in the
        // order work stealing gives; with one rayon thread that order is fixed.
        match std::env::var("RAYON_NUM_THREADS").as_deref() {
            Ok("1") => Ok(()),
            _ => Err(
                "burn-flex adds up tensors of over 64K elements in parallel chunks whose \
                      partial sums combine in the order rayon's work stealing gives; set \
                      RAYON_NUM_THREADS=1 for bitwise repeatable runs"
                    .into(),
            ),
        }
    }

    fn device_stats(_device: &FlexDevice) -> DeviceStats {
        process_stats()
    }
}

/// This process's resident memory (`rss_bytes`) and CPU use since the previous call
/// (`cpu_percent`, 100 per fully used core), plus the host's total memory.
pub fn process_stats() -> DeviceStats {
    static SYSTEM: OnceLock<Mutex<System>> = OnceLock::new();
    let mut stats = DeviceStats::new();
    let Ok(pid) = sysinfo::get_current_pid() else {
        return stats;
    };
    let mut system = SYSTEM
        .get_or_init(|| Mutex::new(System::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    system.refresh_processes_specifics(
        ProcessesToUpdate::Some(&[pid]),
        true,
        ProcessRefreshKind::nothing().with_memory().with_cpu(),
    );
    system.refresh_memory();
    if let Some(process) = system.process(pid) {
        stats.insert("rss_bytes".into(), process.memory() as f64);
        stats.insert("cpu_percent".into(), f64::from(process.cpu_usage()));
    }
    stats.insert(
        "host_memory_total_bytes".into(),
        system.total_memory() as f64,
    );
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_report_this_process() {
        let stats = process_stats();
        assert!(stats["rss_bytes"] > 1e6, "{stats:?}");
        assert!(stats["host_memory_total_bytes"] >= stats["rss_bytes"]);
        assert!(stats.contains_key("cpu_percent"));
    }
}
