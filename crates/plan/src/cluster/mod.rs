//! Cluster environments: who started the processes, and each process's place in the world.
//!
//! Everything here reads a snapshot of environment variables ([`Env`]); nothing touches the
//! process environment, so every rule is testable with a literal map.
//!
//! The six built-ins live in `environments.rs`; SLURM node lists are read by [`hostlist`].

mod environments;
pub mod hostlist;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{FlagError, PlanResult};
use crate::plan::Plan;
pub use environments::{
    KubeflowEnvironment, LocalEnvironment, LsfEnvironment, MpiEnvironment, SlurmEnvironment,
    TorchElasticEnvironment, lsf_port, slurm_port,
};

/// A snapshot of environment variables.
pub type Env = BTreeMap<String, String>;

/// Address used when no environment names one.
pub const DEFAULT_MAIN_ADDRESS: &str = "127.0.0.1";
/// Port used when no environment names one (torch's default rendezvous port).
pub const DEFAULT_MAIN_PORT: u16 = 29500;

pub use crate::names::LOCAL;

/// Where a run's processes come from, and each process's place in the world.
///
/// Implement it for a scheduler ember does not know and register it
/// (`Registry::register_cluster_environment` in ember-core);
/// it is then detected (in registration order, before the built-ins) and selectable as
/// `--trainer.cluster_environment=NAME` or `--trainer.plugins=[NAME]`. Implementations read
/// only the `env` map they are given, never the process environment, so every rule is
/// testable with a literal map. `MASTER_ADDR` and `MASTER_PORT` override whatever
/// [`ranks`](Self::ranks) derives, for every environment.
pub trait ClusterEnvironment: Send + Sync {
    /// The name used by `--trainer.cluster_environment` and in plans.
    fn name(&self) -> &str;

    /// One line for `--help`.
    fn description(&self) -> &str;

    /// Whether the variables say this environment started the process.
    fn detect(&self, env: &Env) -> bool;

    /// Whether something other than ember started the processes (so ember launches none, and
    /// the flags must describe the world the environment started).
    fn creates_processes_externally(&self) -> bool {
        true
    }

    /// This process's world size, ranks and rendezvous address, given the per-node device
    /// count and node count the flags ask for.
    fn ranks(&self, env: &Env, devices_per_node: usize, num_nodes: usize) -> PlanResult<Ranks>;

    /// Refuses flags this environment cannot honour (e.g. several devices per Kubeflow pod),
    /// naming the flag itself; called before the ranks are checked against the flags.
    fn validate(&self, devices_per_node: usize) -> PlanResult<()> {
        let _ = devices_per_node;
        Ok(())
    }

    /// Refuses a finished plan it cannot run (`Err(why)`, e.g. a strategy or accelerator it
    /// does not support); the connector reports `why` as an error of the flag that chose the
    /// environment (`--trainer.cluster_environment` when it was detected).
    fn check_plan(&self, plan: &Plan) -> Result<(), String> {
        let _ = plan;
        Ok(())
    }

    /// The command (program and arguments) that asks the scheduler to run this job again from
    /// the start of its script, as Lightning's `SLURMEnvironment(auto_requeue=True)` does: rank
    /// 0 runs it after writing the checkpoint that a SIGUSR1 stop asked for, when
    /// `--trainer.auto_requeue` is on. `None` (the default): the run just stops.
    fn requeue_command(&self, env: &Env) -> Option<Vec<String>> {
        let _ = env;
        None
    }
}

/// The built-in environments, in detection order (local last: it always matches).
pub fn builtin_environments() -> Vec<Arc<dyn ClusterEnvironment>> {
    vec![
        Arc::new(TorchElasticEnvironment),
        Arc::new(SlurmEnvironment),
        Arc::new(LsfEnvironment),
        Arc::new(MpiEnvironment),
        Arc::new(KubeflowEnvironment),
        Arc::new(LocalEnvironment),
    ]
}

/// The first of `environments` (in order) whose variables are set; `local` when none is.
pub fn detect<'a>(
    environments: &'a [Arc<dyn ClusterEnvironment>],
    env: &Env,
) -> Option<&'a Arc<dyn ClusterEnvironment>> {
    environments
        .iter()
        .find(|e| e.detect(env))
        .or_else(|| environments.iter().find(|e| e.name() == LOCAL))
}

/// This process's ranks under `environment`, with `MASTER_ADDR`/`MASTER_PORT` applied.
pub fn resolve_ranks(
    environment: &dyn ClusterEnvironment,
    env: &Env,
    devices_per_node: usize,
    num_nodes: usize,
) -> PlanResult<Ranks> {
    environment
        .ranks(env, devices_per_node, num_nodes)?
        .with_overrides(env)
}

/// One process's place in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranks {
    /// Processes in the whole run.
    pub world_size: usize,
    /// This process's rank among all of them.
    pub global_rank: usize,
    /// This process's rank on its node.
    pub local_rank: usize,
    /// This process's node.
    pub node_rank: usize,
    /// Address of the rank-0 node, for rendezvous.
    pub main_address: String,
    /// Port on the rank-0 node, for rendezvous.
    pub main_port: u16,
}

impl Ranks {
    /// Ranks at the default rendezvous address and port (`127.0.0.1:29500`).
    pub fn new(world_size: usize, global_rank: usize, local_rank: usize, node_rank: usize) -> Self {
        default_ranks(world_size, global_rank, local_rank, node_rank)
    }

    /// `MASTER_ADDR` and `MASTER_PORT` win over whatever the environment derived.
    pub(crate) fn with_overrides(mut self, env: &Env) -> PlanResult<Self> {
        if let Some(addr) = env.get("MASTER_ADDR") {
            if addr.trim().is_empty() {
                return Err(FlagError::new(
                    "MASTER_ADDR",
                    addr,
                    "expected a host name or IP address",
                ));
            }
            self.main_address = addr.trim().to_owned();
        }
        if let Some(port) = env.get("MASTER_PORT") {
            self.main_port = parse_port("MASTER_PORT", port)?;
        }
        Ok(self)
    }

    /// Refuses a world of 0 or a rank outside it, naming the variables they came from.
    pub fn check(self, world_var: &str, rank_var: &str) -> PlanResult<Self> {
        if self.world_size == 0 {
            return Err(FlagError::new(world_var, "0", "expected an integer > 0"));
        }
        if self.global_rank >= self.world_size {
            return Err(FlagError::new(
                rank_var,
                self.global_rank.to_string(),
                format!("expected a rank below the world size {}", self.world_size),
            ));
        }
        Ok(self)
    }
}

fn parse_port(var: &str, value: &str) -> PlanResult<u16> {
    match value.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(FlagError::new(
            var,
            value,
            "expected a port number in 1..=65535",
        )),
    }
}

/// Reads a non-negative integer variable; `None` when it is not set.
pub fn optional_usize(env: &Env, var: &str) -> PlanResult<Option<usize>> {
    env.get(var)
        .map(|v| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| FlagError::new(var, v, "expected a non-negative integer"))
        })
        .transpose()
}

/// Reads a non-negative integer variable that `environment` must set.
pub fn required_usize(env: &Env, var: &str, environment: &str) -> PlanResult<usize> {
    optional_usize(env, var)?.ok_or_else(|| {
        FlagError::new(
            var,
            "",
            format!("the {environment} cluster environment needs {var} to be set"),
        )
    })
}

fn first_usize(env: &Env, vars: &[&str]) -> PlanResult<Option<usize>> {
    for var in vars {
        if let Some(v) = optional_usize(env, var)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn default_ranks(
    world_size: usize,
    global_rank: usize,
    local_rank: usize,
    node_rank: usize,
) -> Ranks {
    Ranks {
        world_size,
        global_rank,
        local_rank,
        node_rank,
        main_address: DEFAULT_MAIN_ADDRESS.to_owned(),
        main_port: DEFAULT_MAIN_PORT,
    }
}
