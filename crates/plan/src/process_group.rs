//! Process group backends: what the ranks of a distributed strategy reduce gradients through.
//!
//! `mpi` is the host collective of the engine that started the ranks (OpenMPI): gradients
//! travel in host buffers. An accelerator may add a collective of its own that works on device
//! memory (`nccl` for cuda); `ddp` uses it by default there. `--trainer.plugins=[NAME]` chooses
//! one, as Lightning's `DDPStrategy(process_group_backend=...)` does.

use crate::error::{FlagError, PlanResult, list};
use crate::strategy::DDP;

/// The host collective's name.
pub const MPI: &str = "mpi";

/// What the connector knows of the accelerator here: its name and its device collective.
pub struct AcceleratorSide<'a> {
    /// The accelerator's name.
    pub name: &'a str,
    /// Its device collective's name, if it has one.
    pub device_collective: Option<&'a str>,
}

/// The process group backend of a run: `None` for a strategy that is not distributed; else
/// the one `named` (as given to `--trainer.plugins`), checked against the accelerator and
/// strategy, or by default the accelerator's device collective under `ddp` and `mpi` otherwise.
pub fn select(
    named: Option<&str>,
    accelerator: AcceleratorSide<'_>,
    strategy: &str,
    distributed: bool,
) -> PlanResult<Option<String>> {
    let device = accelerator.device_collective.filter(|_| strategy == DDP);
    let Some(name) = named else {
        return Ok(distributed.then(|| device.unwrap_or(MPI).to_owned()));
    };
    let err = |message: String| FlagError::new("--trainer.plugins", name, message);
    if !distributed {
        return Err(err(format!(
            "a process group backend reduces gradients between processes, and strategy {strategy} runs one; choose a distributed strategy (e.g. --trainer.strategy=ddp) or leave {name} out"
        )));
    }
    if name == MPI || Some(name) == device {
        return Ok(Some(name.to_owned()));
    }
    let reason = match accelerator.device_collective {
        Some(own) if own == name => format!(
            "{name} reduces the gradients of strategy ddp only; strategy {strategy} goes through {MPI}"
        ),
        Some(own) => format!(
            "accelerator {} reduces on its devices through {own}, not {name}; allowed: {}",
            accelerator.name,
            list([MPI, own])
        ),
        None => format!(
            "accelerator {} has no device collective; its ranks go through {MPI}",
            accelerator.name
        ),
    };
    Err(err(reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::DDP_SHARDED;

    const CUDA: AcceleratorSide = AcceleratorSide {
        name: "cuda",
        device_collective: Some("nccl"),
    };
    const CPU: AcceleratorSide = AcceleratorSide {
        name: "cpu",
        device_collective: None,
    };

    #[test]
    fn ddp_defaults_to_the_accelerators_device_collective() {
        let pick = |a, s: &str, d: bool| select(None, a, s, d).unwrap();
        assert_eq!(pick(CUDA, DDP, true).as_deref(), Some("nccl"));
        assert_eq!(pick(CUDA, DDP_SHARDED, true).as_deref(), Some(MPI));
        assert_eq!(pick(CPU, DDP, true).as_deref(), Some(MPI));
        assert_eq!(pick(CUDA, "single_device", false), None);
    }

    #[test]
    fn a_named_backend_must_fit_the_accelerator_and_strategy() {
        assert_eq!(
            select(Some(MPI), CUDA, DDP, true).unwrap().as_deref(),
            Some(MPI)
        );
        let message = |e: FlagError| e.to_string();
        let on_cpu = message(select(Some("nccl"), CPU, DDP, true).unwrap_err());
        assert!(
            on_cpu.contains("accelerator cpu has no device collective"),
            "{on_cpu}"
        );
        let sharded = message(select(Some("nccl"), CUDA, DDP_SHARDED, true).unwrap_err());
        assert!(sharded.contains("strategy ddp only"), "{sharded}");
        let single = message(select(Some(MPI), CUDA, "single_device", false).unwrap_err());
        assert!(single.contains("--trainer.plugins"), "{single}");
    }
}
