//! ember's CPU accelerator: burn's Flex backend under autodiff.
//!
//! On a CPU, `devices` counts processes (ddp runs one per device id); every process uses the
//! one host device. Why Flex rather than NdArray: `docs/architecture.md` has the measurement.

mod adam;
mod batch_norm;
mod fused;
mod layer_norm;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

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

    fn install_kernels() {
        ember_core::nn::install_batch_norm::<CpuBackend>(batch_norm::CpuBatchNorm);
        ember_core::nn::install_layer_norm::<CpuBackend>(layer_norm::CpuLayerNorm);
        ember_core::optim::adam::install_adam::<Flex>(adam::CpuAdam);
    }

    fn device_stats(_device: &FlexDevice) -> DeviceStats {
        process_stats()
    }
}

/// This process's resident memory (`rss_bytes`), the host's total memory
/// (`host_memory_total_bytes`) and the process's CPU use since the previous call (`cpu_percent`,
/// 100 per fully used core): the CPU time all its threads took over that wall time, so it is
/// exact however often it is asked. The first call has no interval and reports no CPU use.
pub fn process_stats() -> DeviceStats {
    static SAMPLER: OnceLock<Mutex<Sampler>> = OnceLock::new();
    let mut sampler = SAMPLER
        .get_or_init(|| {
            Mutex::new(Sampler {
                system: System::new(),
                previous: None,
            })
        })
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut stats = DeviceStats::new();
    if let Some(percent) = sampler.cpu_percent() {
        stats.insert("cpu_percent".into(), percent);
    }
    let system = &mut sampler.system;
    if let Ok(pid) = sysinfo::get_current_pid() {
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            true,
            ProcessRefreshKind::nothing().with_memory(),
        );
        if let Some(process) = system.process(pid) {
            stats.insert("rss_bytes".into(), process.memory() as f64);
        }
    }
    system.refresh_memory();
    stats.insert(
        "host_memory_total_bytes".into(),
        system.total_memory() as f64,
    );
    stats
}

/// What [`process_stats`] keeps between calls.
struct Sampler {
    system: System,
    /// The wall clock and this process's CPU time at the previous call.
    previous: Option<(Instant, Duration)>,
}

impl Sampler {
    /// The CPU time taken since the previous call as a share of the wall time, in percent.
    fn cpu_percent(&mut self) -> Option<f64> {
        let now = (Instant::now(), process_cpu_time()?);
        let (wall, cpu) = self.previous.replace(now)?;
        let elapsed = now.0.duration_since(wall).as_secs_f64();
        (elapsed > 0.0).then(|| 100.0 * now.1.saturating_sub(cpu).as_secs_f64() / elapsed)
    }
}

/// The CPU time every thread of this process has taken (user and system), to the nanosecond
/// the kernel keeps.
fn process_cpu_time() -> Option<Duration> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid timespec for the call to fill.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut time) };
    let seconds = u64::try_from(time.tv_sec).ok()?;
    let nanos = u32::try_from(time.tv_nsec).ok()?;
    (status == 0).then(|| Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_report_this_process() {
        let stats = process_stats();
        assert!(stats["rss_bytes"] > 1e6, "{stats:?}");
        assert!(stats["host_memory_total_bytes"] >= stats["rss_bytes"]);
    }

    /// A thread that spins for 300 ms uses one core for that time (under load, at least part
    /// of one), and a process that sleeps uses next to none; asked every 30 ms, as a monitor
    /// logging every few fast steps asks.
    #[test]
    fn cpu_use_follows_a_busy_loop_however_often_it_is_asked() {
        let mut sampler = Sampler {
            system: System::new(),
            previous: None,
        };
        assert_eq!(
            sampler.cpu_percent(),
            None,
            "the first call has no interval"
        );
        let spin = |ms: u64| {
            let until = Instant::now() + Duration::from_millis(ms);
            let mut x = 0u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        };
        let busy: Vec<f64> = (0..10)
            .map(|_| {
                spin(30);
                sampler.cpu_percent().unwrap()
            })
            .collect();
        let mean = busy.iter().sum::<f64>() / busy.len() as f64;
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        // One spinning thread: about 100; other threads of the test binary may add some.
        assert!(mean > 40.0 && mean <= 100.0 * cores + 10.0, "{busy:?}");
        std::thread::sleep(Duration::from_millis(300));
        let idle = sampler.cpu_percent().unwrap();
        assert!(idle < mean, "sleeping {idle} vs spinning {mean}");
    }
}
