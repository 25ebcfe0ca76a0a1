//! The resolved plan of a run: what the connector decided.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::precision::Precision;

/// Everything the Trainer needs to know about where and how to run, resolved from flags,
/// environment and inventory. `--print-plan` prints it as one JSON object with exactly these keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Selected accelerator name.
    pub accelerator: String,
    /// Selected strategy name.
    pub strategy: String,
    /// Device ids this node uses (one process each under ddp; all driven by one process under
    /// a strategy with one process per node, `xla`).
    pub devices: Vec<usize>,
    /// Number of nodes.
    pub num_nodes: usize,
    /// Precision in effect (the named precision a precision plugin builds on).
    pub precision: Precision,
    /// Whether the run requires bitwise reproducible kernels (`--trainer.deterministic`); the
    /// connector refused it where the accelerator cannot honour it, and the Trainer's builder
    /// refuses a hand-made plan that asks it of such an accelerator.
    pub deterministic: bool,
    /// Whether fit recomputes the activations of the model's checkpointed blocks in the
    /// backward pass (`--trainer.activation_checkpointing`); shown when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub activation_checkpointing: bool,
    /// Whether host threads flush subnormal floats to zero (`--trainer.flush_denormal`, on by
    /// default for CPU accelerators). The Trainer sets the mode from this field alone.
    pub flush_denormal: bool,
    /// The precision plugin the Trainer builds, as `--trainer.plugins` or `--trainer.precision`
    /// named it; `None` (not shown): the plugin registered under `precision`'s name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision_plugin: Option<String>,
    /// The checkpoint IO the Trainer builds, as `--trainer.plugins` named it; `None` (not
    /// shown): local files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_io: Option<String>,
    /// What `ddp`'s ranks reduce gradients through (`nccl`: on the device; `mpi`: host
    /// buffers through the engine that started the ranks), as `--trainer.plugins` chose it or
    /// the accelerator's default; shown for strategies other than single_device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_group_backend: Option<String>,
    /// Cluster environment name.
    pub cluster_environment: String,
    /// Processes in the run.
    pub world_size: usize,
    /// This process's global rank.
    pub global_rank: usize,
    /// This process's rank on its node.
    pub local_rank: usize,
    /// This process's node.
    pub node_rank: usize,
    /// Rendezvous address of rank 0.
    pub main_address: String,
    /// Rendezvous port of rank 0.
    pub main_port: u16,
    /// The `init_args` of the plugins the plan runs that were given some, by the plugin's
    /// name (`{class_path, init_args}` tables in the flags); read with
    /// [`init_args`](Self::init_args).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub init_args: BTreeMap<String, Value>,
    /// Warnings raised while planning (printed to stderr, not part of the JSON).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Who starts the processes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// This process is the only one on its node, or the cluster started every process.
    None,
    /// ember's local launcher starts `processes - 1` more copies of this program on this node.
    Local {
        /// Processes on this node, this one included.
        processes: usize,
    },
}

impl Plan {
    /// The plan the connector makes for one process on device 0 of `accelerator` on this
    /// machine (for tests, benchmarks and programs that build a Trainer without the CLI):
    /// not deterministic, and subnormal floats flushed where the architecture can (the CPU
    /// default; set `flush_denormal` for another accelerator or choice).
    pub fn local(accelerator: &str, precision: Precision) -> Self {
        Self {
            accelerator: accelerator.to_owned(),
            strategy: crate::names::SINGLE_DEVICE.to_owned(),
            devices: vec![0],
            num_nodes: 1,
            precision,
            deterministic: false,
            activation_checkpointing: false,
            flush_denormal: crate::accelerator::FLUSH_DENORMAL_SUPPORTED,
            precision_plugin: None,
            checkpoint_io: None,
            process_group_backend: None,
            cluster_environment: crate::names::LOCAL.to_owned(),
            world_size: 1,
            global_rank: 0,
            local_rank: 0,
            node_rank: 0,
            main_address: "127.0.0.1".to_owned(),
            main_port: 29500,
            init_args: BTreeMap::new(),
            warnings: Vec::new(),
        }
    }

    /// The arguments given for plugin `name` (a strategy, precision plugin, checkpoint IO or
    /// process group backend this plan runs), as `T`: what its factory reads. None given read as
    /// an empty table, so a `T` whose fields all have defaults comes back as its default. The
    /// connector has checked them against the type the plugin declared.
    pub fn init_args<T: DeserializeOwned>(&self, name: &str) -> anyhow::Result<T> {
        crate::init_args::read(&self.init_args, name)
    }

    /// The launcher this plan needs.
    pub fn launcher(&self) -> Launcher {
        let processes = self.world_size / self.num_nodes.max(1);
        if self.cluster_environment == crate::names::LOCAL && processes > 1 {
            Launcher::Local { processes }
        } else {
            Launcher::None
        }
    }

    /// Whether this process drives all of its node's devices (`xla`: one process per node)
    /// rather than one of them.
    pub fn drives_every_device(&self) -> bool {
        self.devices.len() > 1 && self.world_size == self.num_nodes
    }

    /// How many devices this process drives: all of its node's when it
    /// [drives every device](Self::drives_every_device), else one.
    pub fn devices_per_process(&self) -> usize {
        if self.drives_every_device() {
            self.devices.len()
        } else {
            1
        }
    }

    /// The device id this process drives (the first, when it drives them all).
    pub fn local_device(&self) -> usize {
        self.devices[self.local_rank.min(self.devices.len() - 1)]
    }

    /// The plan as the one-line JSON object `--print-plan` prints.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a plan always serializes")
    }
}
