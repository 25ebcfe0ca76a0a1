//! What the planner knows of an accelerator without its backend: its family, and whether it
//! can honour `--trainer.deterministic`.

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
