//! What the planner knows of an accelerator without its backend: its family, whether it can
//! honour `--trainer.deterministic`, and whether its runs flush subnormal floats.

use crate::error::{FlagError, PlanResult};

/// What family an accelerator belongs to; it decides the default device rules,
/// whether `--trainer.accelerator=gpu` may pick it, and how 16-mixed is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AcceleratorKind {
    /// Host CPU: `devices` counts processes.
    Cpu,
    /// A GPU: `devices` counts or names device ids; eligible for `accelerator=gpu`.
    Gpu,
    /// A TPU: `devices` is `auto`, 1, the full count, or `[i]`.
    Tpu,
    /// Anything else: GPU-style device rules, never picked by `gpu`.
    Other,
}

/// Refuses `--trainer.deterministic=true` on an accelerator whose kernels cannot honour it
/// (`support` is the accelerator's `Accelerator::deterministic` in ember-core).
pub fn check_deterministic(
    accelerator: &str,
    wanted: bool,
    support: fn() -> Result<(), String>,
) -> PlanResult<()> {
    match support() {
        Err(reason) if wanted => Err(FlagError::new(
            "--trainer.deterministic",
            "true",
            format!("accelerator {accelerator} cannot guarantee bitwise repeatable runs: {reason}"),
        )),
        _ => Ok(()),
    }
}

/// Whether this architecture has a flush-to-zero mode ember can set (x86-64's MXCSR,
/// aarch64's FPCR).
pub const FLUSH_DENORMAL_SUPPORTED: bool =
    cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Whether a run on an accelerator of `kind` flushes subnormal floats on its host threads:
/// `--trainer.flush_denormal` when set, else on for CPU accelerators. Asking for it where the
/// architecture has no such mode is refused.
pub fn flush_denormal(option: Option<bool>, kind: AcceleratorKind) -> PlanResult<bool> {
    match option {
        Some(true) if !FLUSH_DENORMAL_SUPPORTED => Err(FlagError::new(
            "--trainer.flush_denormal",
            "true",
            format!(
                "false or null: {} has no flush-to-zero mode ember can set (x86_64 and aarch64 do)",
                std::env::consts::ARCH
            ),
        )),
        Some(on) => Ok(on),
        None => Ok(FLUSH_DENORMAL_SUPPORTED && kind == AcceleratorKind::Cpu),
    }
}
