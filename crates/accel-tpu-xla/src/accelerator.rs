//! The `xla` accelerator: the lazy xla backend under autodiff, on whatever PJRT plugin is
//! configured (XLA's CPU plugin, XLA's CUDA plugin, libtpu on a TPU VM).

use std::sync::mpsc;
use std::time::Duration;

use burn_autodiff::Autodiff;
use ember_core::{Accelerator, AcceleratorKind, DeviceStats, DevicesFlag, Precision};

use crate::backend::{Xla, XlaDevice, runtime};
use crate::pjrt::plugin;

/// The backend xla runs train on.
pub type XlaBackend = Autodiff<Xla>;

/// How long probing waits for the PJRT client before reporting no devices.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Programs compiled to StableHLO and run through a PJRT plugin.
pub struct XlaAccelerator;

/// The number of devices the PJRT plugin offers, asked on a thread that probing waits on for at
/// most `PROBE_TIMEOUT`: a plugin that hangs (libtpu off a TPU VM) cannot hang ember.
pub fn device_count() -> usize {
    if plugin::find().is_err() {
        return 0;
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let count = match runtime::runtime() {
            Ok(rt) => rt.device_count(),
            Err(e) => {
                tracing::warn!("xla: {e}");
                0
            }
        };
        let _ = tx.send(count);
    });
    rx.recv_timeout(PROBE_TIMEOUT).unwrap_or_else(|_| {
        tracing::warn!("xla: the PJRT plugin did not start within {PROBE_TIMEOUT:?}");
        0
    })
}

impl Accelerator for XlaAccelerator {
    type Backend = XlaBackend;

    fn name() -> &'static str {
        "xla"
    }

    fn description() -> &'static str {
        "XLA through a PJRT plugin: TPUs (libtpu), or XLA's CPU/CUDA plugins (EMBER_PJRT_PLUGIN)"
    }

    fn kind() -> AcceleratorKind {
        AcceleratorKind::Tpu
    }

    /// `auto` picks xla only on a TPU VM (libtpu present and TPU devices visible); a CPU or
    /// CUDA plugin is used when asked for by name.
    fn auto_priority() -> Option<u32> {
        plugin::tpu_plugin().map(|_| 40)
    }

    fn is_available() -> bool {
        plugin::find().is_ok()
    }

    fn auto_device_count() -> usize {
        device_count()
    }

    /// The TPU rule (`auto`, 1, all, or `[i]`), except that `auto` means one device unless the
    /// plugin is libtpu: XLA's CPU plugin reports 4 devices that share the same cores.
    fn parse_devices(flag: &DevicesFlag, available: usize) -> Result<Vec<usize>, String> {
        if matches!(flag, DevicesFlag::Auto) && plugin::tpu_plugin().is_none() {
            return if available == 0 {
                Err("no devices of this accelerator exist".into())
            } else {
                Ok(vec![0])
            };
        }
        ember_core::devices::tpu_devices(flag, available)
    }

    fn parallel_devices(ids: &[usize]) -> Vec<XlaDevice> {
        ids.iter().map(|&i| XlaDevice::new(i)).collect()
    }

    /// Consecutive devices, driven as one: each program partitioned over them by XLA.
    fn spanning_device(ids: &[usize]) -> Result<XlaDevice, String> {
        let first = *ids.first().ok_or("no devices")?;
        if ids.iter().enumerate().any(|(i, &id)| id != first + i) {
            return Err(format!(
                "one process drives consecutive devices only (e.g. [{first}..{}])",
                first + ids.len() - 1
            ));
        }
        Ok(XlaDevice::spanning(first, ids.len()))
    }

    /// f32, and bf16 (TPUs' native type) alone or for compute beside f32 weights. No 64-true:
    /// TPUs have no f64 (XLA's CPU plugin would run it, but one rule for every plugin keeps
    /// a config portable).
    fn precisions() -> &'static [Precision] {
        &[
            Precision::F32True,
            Precision::Bf16True,
            Precision::Bf16Mixed,
        ]
    }

    fn deterministic() -> Result<(), String> {
        Err(
            "XLA's compilers may fuse and reorder reductions differently per program; ember \
             does not promise bitwise repeatability on xla"
                .into(),
        )
    }

    fn batch_scope(device: &XlaDevice, rows: Option<usize>) {
        crate::backend::batch_scope(device, rows);
    }

    fn device_stats(_device: &XlaDevice) -> DeviceStats {
        let stats = runtime::stats();
        let mut out = DeviceStats::new();
        out.insert("xla_programs_compiled".into(), stats.compiles as f64);
        out.insert("xla_cache_hits".into(), stats.hits as f64);
        out.insert("xla_segments_lowered".into(), stats.lowerings as f64);
        out.insert("xla_compile_seconds".into(), stats.compile_seconds);
        out.insert("xla_executions".into(), stats.executions as f64);
        out
    }
}
