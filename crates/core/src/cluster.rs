//! Cluster environments: who started the processes, and each process's place in the world.
//!
//! Everything here reads a snapshot of environment variables ([`Env`]); nothing touches the
//! process environment, so every rule is testable with a literal map.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{FlagError, PlanResult};

/// A snapshot of environment variables.
pub type Env = BTreeMap<String, String>;

/// Address used when no environment names one.
pub const DEFAULT_MAIN_ADDRESS: &str = "127.0.0.1";
/// Port used when no environment names one (torch's default rendezvous port).
pub const DEFAULT_MAIN_PORT: u16 = 29500;

/// Name of the environment ember's own launcher (or a user setting `LOCAL_RANK` by hand) runs in.
pub const LOCAL: &str = "local";

/// Where a run's processes come from, and each process's place in the world.
///
/// Implement it for a scheduler ember does not know and register it
/// ([`Registry::register_cluster_environment`](crate::Registry::register_cluster_environment));
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

    /// Refuses flags this environment cannot honour (e.g. several devices per Kubeflow pod).
    fn validate(&self, devices_per_node: usize) -> PlanResult<()> {
        let _ = devices_per_node;
        Ok(())
    }
}

/// ember's own local launcher starts one process per device (or the user did, setting
/// `LOCAL_RANK`/`NODE_RANK` by hand). Always detected: it is the fallback.
#[derive(Debug, Clone, Copy)]
pub struct LocalEnvironment;

/// Started by `torchrun` / torch elastic.
#[derive(Debug, Clone, Copy)]
pub struct TorchElasticEnvironment;

/// Started by SLURM's `srun`.
#[derive(Debug, Clone, Copy)]
pub struct SlurmEnvironment;

/// Started by IBM LSF's `jsrun`.
#[derive(Debug, Clone, Copy)]
pub struct LsfEnvironment;

/// Started by `mpirun`/`mpiexec` (OpenMPI, MPICH, Intel MPI).
#[derive(Debug, Clone, Copy)]
pub struct MpiEnvironment;

/// A Kubeflow PyTorchJob: one process per pod.
#[derive(Debug, Clone, Copy)]
pub struct KubeflowEnvironment;

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

fn has(env: &Env, key: &str) -> bool {
    env.contains_key(key)
}

impl ClusterEnvironment for LocalEnvironment {
    fn name(&self) -> &str {
        LOCAL
    }
    fn description(&self) -> &str {
        "ember's launcher starts one process per device on this machine"
    }
    fn detect(&self, _env: &Env) -> bool {
        true
    }
    fn creates_processes_externally(&self) -> bool {
        false
    }
    fn ranks(&self, env: &Env, devices_per_node: usize, num_nodes: usize) -> PlanResult<Ranks> {
        local_ranks(env, devices_per_node, num_nodes)
    }
}

impl ClusterEnvironment for TorchElasticEnvironment {
    fn name(&self) -> &str {
        "torchelastic"
    }
    fn description(&self) -> &str {
        "started by torchrun (TORCHELASTIC_RUN_ID)"
    }
    fn detect(&self, env: &Env) -> bool {
        has(env, "TORCHELASTIC_RUN_ID")
    }
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        torchelastic_ranks(env)
    }
}

impl ClusterEnvironment for SlurmEnvironment {
    fn name(&self) -> &str {
        "slurm"
    }
    fn description(&self) -> &str {
        "started by SLURM's srun (SLURM_NTASKS, not an interactive job)"
    }
    fn detect(&self, env: &Env) -> bool {
        let interactive = matches!(
            env.get("SLURM_JOB_NAME").map(String::as_str),
            Some("bash" | "interactive")
        );
        has(env, "SLURM_NTASKS") && !interactive
    }
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        slurm_ranks(env)
    }
}

impl ClusterEnvironment for LsfEnvironment {
    fn name(&self) -> &str {
        "lsf"
    }
    fn description(&self) -> &str {
        "started by IBM LSF's jsrun (LSB_JOBID, JSM_NAMESPACE_SIZE)"
    }
    fn detect(&self, env: &Env) -> bool {
        has(env, "LSB_JOBID") && has(env, "JSM_NAMESPACE_SIZE")
    }
    fn ranks(&self, env: &Env, devices_per_node: usize, _: usize) -> PlanResult<Ranks> {
        lsf_ranks(env, devices_per_node)
    }
}

impl ClusterEnvironment for MpiEnvironment {
    fn name(&self) -> &str {
        "mpi"
    }
    fn description(&self) -> &str {
        "started by mpirun/mpiexec (OpenMPI, MPICH, Intel MPI)"
    }
    fn detect(&self, env: &Env) -> bool {
        has(env, "OMPI_COMM_WORLD_SIZE") || (has(env, "PMI_SIZE") && has(env, "PMI_RANK"))
    }
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        mpi_ranks(env)
    }
}

impl ClusterEnvironment for KubeflowEnvironment {
    fn name(&self) -> &str {
        "kubeflow"
    }
    fn description(&self) -> &str {
        "a Kubeflow PyTorchJob: one process per pod"
    }
    fn detect(&self, env: &Env) -> bool {
        [
            "KUBERNETES_PORT",
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
        ]
        .iter()
        .all(|k| has(env, k))
    }
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        kubeflow_ranks(env)
    }
    fn validate(&self, devices_per_node: usize) -> PlanResult<()> {
        if devices_per_node == 1 {
            return Ok(());
        }
        Err(FlagError::new(
            "--trainer.devices",
            devices_per_node.to_string(),
            "the kubeflow environment runs one process per pod; use --trainer.devices=1 and --trainer.num_nodes=WORLD_SIZE",
        ))
    }
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

fn local_ranks(env: &Env, devices_per_node: usize, num_nodes: usize) -> PlanResult<Ranks> {
    let local_rank = optional_usize(env, "LOCAL_RANK")?.unwrap_or(0);
    let node_rank = first_usize(env, &["NODE_RANK", "GROUP_RANK"])?.unwrap_or(0);
    if local_rank >= devices_per_node {
        return Err(FlagError::new(
            "LOCAL_RANK",
            local_rank.to_string(),
            format!("expected a local rank below --trainer.devices ({devices_per_node} per node)"),
        ));
    }
    if node_rank >= num_nodes {
        return Err(FlagError::new(
            "NODE_RANK",
            node_rank.to_string(),
            format!("expected a node rank below --trainer.num_nodes ({num_nodes})"),
        ));
    }
    let world = devices_per_node * num_nodes;
    Ok(default_ranks(
        world,
        node_rank * devices_per_node + local_rank,
        local_rank,
        node_rank,
    ))
}

fn torchelastic_ranks(env: &Env) -> PlanResult<Ranks> {
    let e = "torchelastic";
    default_ranks(
        required_usize(env, "WORLD_SIZE", e)?,
        required_usize(env, "RANK", e)?,
        required_usize(env, "LOCAL_RANK", e)?,
        required_usize(env, "GROUP_RANK", e)?,
    )
    .check("WORLD_SIZE", "RANK")
}

fn slurm_ranks(env: &Env) -> PlanResult<Ranks> {
    let e = "slurm";
    let mut ranks = default_ranks(
        required_usize(env, "SLURM_NTASKS", e)?,
        required_usize(env, "SLURM_PROCID", e)?,
        required_usize(env, "SLURM_LOCALID", e)?,
        required_usize(env, "SLURM_NODEID", e)?,
    )
    .check("SLURM_NTASKS", "SLURM_PROCID")?;
    let (var, nodelist) = ["SLURM_NODELIST", "SLURM_JOB_NODELIST"]
        .iter()
        .find_map(|v| env.get(*v).map(|l| (*v, l)))
        .ok_or_else(|| {
            FlagError::new(
                "SLURM_NODELIST",
                "",
                "the slurm cluster environment needs SLURM_NODELIST to be set",
            )
        })?;
    ranks.main_address = first_host(nodelist).map_err(|m| FlagError::new(var, nodelist, m))?;
    if let Some(job_id) = optional_usize(env, "SLURM_JOB_ID")? {
        ranks.main_port = slurm_port(job_id);
    }
    Ok(ranks)
}

/// A port derived from the SLURM job id, so that jobs sharing a node do not collide.
pub fn slurm_port(job_id: usize) -> u16 {
    20000 + (job_id % 10000) as u16
}

fn lsf_ranks(env: &Env, devices_per_node: usize) -> PlanResult<Ranks> {
    let e = "lsf";
    let global = required_usize(env, "JSM_NAMESPACE_RANK", e)?;
    let mut ranks = default_ranks(
        required_usize(env, "JSM_NAMESPACE_SIZE", e)?,
        global,
        required_usize(env, "JSM_NAMESPACE_LOCAL_RANK", e)?,
        global / devices_per_node.max(1),
    )
    .check("JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK")?;
    if let Some(hosts) = env.get("LSB_MCPU_HOSTS") {
        ranks.main_address = lsf_first_compute_host(hosts).ok_or_else(|| {
            FlagError::new(
                "LSB_MCPU_HOSTS",
                hosts,
                "expected `host slots` pairs, the batch host first",
            )
        })?;
    }
    Ok(ranks)
}

/// `LSB_MCPU_HOSTS` is `batchhost 1 host1 42 host2 42`: the first compute host runs rank 0.
fn lsf_first_compute_host(hosts: &str) -> Option<String> {
    let names: Vec<&str> = hosts.split_whitespace().step_by(2).collect();
    names.get(1).or(names.first()).map(|h| (*h).to_owned())
}

fn mpi_ranks(env: &Env) -> PlanResult<Ranks> {
    let (world_var, rank_var, local_var, local_size_var) =
        if env.contains_key("OMPI_COMM_WORLD_SIZE") {
            (
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            )
        } else {
            ("PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
        };
    let e = "mpi";
    let world = required_usize(env, world_var, e)?;
    let global = required_usize(env, rank_var, e)?;
    let local = optional_usize(env, local_var)?.unwrap_or(0);
    let local_size = optional_usize(env, local_size_var)?.unwrap_or(world).max(1);
    default_ranks(world, global, local, global / local_size).check(world_var, rank_var)
}

fn kubeflow_ranks(env: &Env) -> PlanResult<Ranks> {
    let e = "kubeflow";
    let rank = required_usize(env, "RANK", e)?;
    default_ranks(required_usize(env, "WORLD_SIZE", e)?, rank, 0, rank).check("WORLD_SIZE", "RANK")
}

/// Most hosts a SLURM node list may expand to.
const MAX_HOSTS: usize = 1 << 16;

/// The first host of a SLURM node list such as `node[01-04,07],gpu5`.
pub fn first_host(nodelist: &str) -> Result<String, String> {
    expand_hostlist(nodelist)?
        .into_iter()
        .next()
        .ok_or_else(|| "expected a SLURM node list such as node[01-04,07]".to_owned())
}

/// Expands a SLURM host list (`a[1-3,5]b,c`, zero padding kept, several bracket groups allowed).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top_level(list)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        hosts.extend(expand_item(item)?);
        if hosts.len() > MAX_HOSTS {
            return Err(format!("node list expands to more than {MAX_HOSTS} hosts"));
        }
    }
    Ok(hosts)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced or nested brackets in node list".to_owned());
        }
    }
    if depth != 0 {
        return Err("unbalanced brackets in node list".to_owned());
    }
    parts.push(&list[start..]);
    Ok(parts)
}

fn expand_item(item: &str) -> Result<Vec<String>, String> {
    let Some(open) = item.find('[') else {
        return Ok(vec![item.to_owned()]);
    };
    let close = item[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or("unbalanced brackets in node list")?;
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let tails = expand_item(rest)?;
    let mut out = Vec::new();
    for range in ranges.split(',') {
        for number in expand_range(range.trim())? {
            for tail in &tails {
                out.push(format!("{prefix}{number}{tail}"));
                if out.len() > MAX_HOSTS {
                    return Err(format!("node list expands to more than {MAX_HOSTS} hosts"));
                }
            }
        }
    }
    Ok(out)
}

/// `01-04` → `01 02 03 04`; `7` → `7`.
fn expand_range(range: &str) -> Result<Vec<String>, String> {
    let bad = || format!("bad range `{range}` in node list; expected N or N-M");
    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
    let width = lo.len();
    let lo_n: u64 = lo.parse().map_err(|_| bad())?;
    let hi_n: u64 = hi.parse().map_err(|_| bad())?;
    if hi_n < lo_n || hi_n - lo_n >= MAX_HOSTS as u64 {
        return Err(bad());
    }
    Ok((lo_n..=hi_n).map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists() {
        assert_eq!(
            expand_hostlist("node[01-04,07]").unwrap(),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(expand_hostlist("a,b[1-2]").unwrap(), ["a", "b1", "b2"]);
        assert_eq!(
            expand_hostlist("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert_eq!(first_host("gpu-[9-10]").unwrap(), "gpu-9");
        assert!(expand_hostlist("n[1-").is_err());
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[0-99999999999]").is_err());
        assert!(first_host("").is_err());
    }

    #[test]
    fn lsf_hosts_skip_the_batch_host() {
        assert_eq!(
            lsf_first_compute_host("batch 1 h1 42 h2 42").as_deref(),
            Some("h1")
        );
        assert_eq!(lsf_first_compute_host("only 4").as_deref(), Some("only"));
    }
}
