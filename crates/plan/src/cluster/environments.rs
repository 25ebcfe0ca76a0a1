//! The six built-in cluster environments. Each follows Lightning's rules for the cases its
//! tests cover (defaults, node lists, ports, LSF's rank file, an MPI world of one); where ember
//! deliberately differs, `docs/cli.md` ("Cluster environments") says so.

use super::hostlist::first_host;
use super::{
    ClusterEnvironment, Env, LOCAL, Ranks, default_ranks, first_usize, optional_usize,
    required_usize,
};
use crate::error::{FlagError, PlanResult};

/// The port Lightning uses under a scheduler that names none (SLURM without a job id,
/// torchelastic without `MASTER_PORT`).
const SCHEDULER_DEFAULT_PORT: u16 = 12910;

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

/// Started by `mpirun`/`mpiexec` (OpenMPI, MPICH, Intel MPI) with more than one process.
#[derive(Debug, Clone, Copy)]
pub struct MpiEnvironment;

/// A Kubeflow PyTorchJob: one process per pod.
#[derive(Debug, Clone, Copy)]
pub struct KubeflowEnvironment;

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
        let local_rank = optional_usize(env, "LOCAL_RANK")?.unwrap_or(0);
        let node_rank = first_usize(env, &["NODE_RANK", "GROUP_RANK"])?.unwrap_or(0);
        if local_rank >= devices_per_node {
            return Err(FlagError::new(
                "LOCAL_RANK",
                local_rank.to_string(),
                format!(
                    "expected a local rank below --trainer.devices ({devices_per_node} per node)"
                ),
            ));
        }
        if node_rank >= num_nodes {
            return Err(FlagError::new(
                "NODE_RANK",
                node_rank.to_string(),
                format!("expected a node rank below --trainer.num_nodes ({num_nodes})"),
            ));
        }
        Ok(default_ranks(
            devices_per_node * num_nodes,
            node_rank * devices_per_node + local_rank,
            local_rank,
            node_rank,
        ))
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
    /// `GROUP_RANK` defaults to node 0; without `MASTER_PORT` the port is 12910.
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        let e = "torchelastic";
        let mut ranks = default_ranks(
            required_usize(env, "WORLD_SIZE", e)?,
            required_usize(env, "RANK", e)?,
            required_usize(env, "LOCAL_RANK", e)?,
            optional_usize(env, "GROUP_RANK")?.unwrap_or(0),
        )
        .check("WORLD_SIZE", "RANK")?;
        ranks.main_port = SCHEDULER_DEFAULT_PORT;
        Ok(ranks)
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
        has(env, "SLURM_NTASKS") && !slurm_interactive(env)
    }
    /// The main address is the first host of `SLURM_NODELIST` (127.0.0.1 without one); the
    /// port comes from the job id ([`slurm_port`]), 12910 without one.
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        let e = "slurm";
        let mut ranks = default_ranks(
            required_usize(env, "SLURM_NTASKS", e)?,
            required_usize(env, "SLURM_PROCID", e)?,
            required_usize(env, "SLURM_LOCALID", e)?,
            required_usize(env, "SLURM_NODEID", e)?,
        )
        .check("SLURM_NTASKS", "SLURM_PROCID")?;
        let nodelist = ["SLURM_NODELIST", "SLURM_JOB_NODELIST"]
            .iter()
            .find_map(|v| env.get(*v).map(|l| (*v, l)));
        if let Some((var, nodelist)) = nodelist {
            ranks.main_address =
                first_host(nodelist).map_err(|m| FlagError::new(var, nodelist, m))?;
        }
        ranks.main_port =
            optional_usize(env, "SLURM_JOB_ID")?.map_or(SCHEDULER_DEFAULT_PORT, slurm_port);
        Ok(ranks)
    }
    /// `scontrol requeue JOB`; an array job's task is `ARRAYJOB_TASK`, as Lightning names it.
    fn requeue_command(&self, env: &Env) -> Option<Vec<String>> {
        let job = match (
            env.get("SLURM_ARRAY_JOB_ID"),
            env.get("SLURM_ARRAY_TASK_ID"),
        ) {
            (Some(array), Some(task)) => format!("{array}_{task}"),
            _ => env.get("SLURM_JOB_ID")?.clone(),
        };
        Some(vec!["scontrol".into(), "requeue".into(), job])
    }
}

/// An interactive allocation (`srun --pty bash`, `salloc`): its processes are not ranks.
fn slurm_interactive(env: &Env) -> bool {
    matches!(
        env.get("SLURM_JOB_NAME").map(String::as_str),
        Some("bash" | "interactive")
    )
}

/// The port of a SLURM job: 15000 plus the job id's last four digits, so that jobs sharing a
/// node do not collide.
pub fn slurm_port(job_id: usize) -> u16 {
    15000 + (job_id % 10000) as u16
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
    /// The main address is the first compute host of the rank file `LSB_DJOB_RANKFILE` names
    /// (else of `LSB_MCPU_HOSTS`); the port comes from the job id ([`lsf_port`]).
    fn ranks(&self, env: &Env, devices_per_node: usize, _: usize) -> PlanResult<Ranks> {
        let e = "lsf";
        let global = required_usize(env, "JSM_NAMESPACE_RANK", e)?;
        let mut ranks = default_ranks(
            required_usize(env, "JSM_NAMESPACE_SIZE", e)?,
            global,
            required_usize(env, "JSM_NAMESPACE_LOCAL_RANK", e)?,
            global / devices_per_node.max(1),
        )
        .check("JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK")?;
        ranks.main_port = lsf_port(required_usize(env, "LSB_JOBID", e)?);
        if let Some(path) = env.get("LSB_DJOB_RANKFILE") {
            ranks.main_address = lsf_rankfile_main_host(path)?;
        } else if let Some(hosts) = env.get("LSB_MCPU_HOSTS") {
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
}

/// The port of an LSF job: 10000 plus the job id modulo 1000.
pub fn lsf_port(job_id: usize) -> u16 {
    10000 + (job_id % 1000) as u16
}

/// The rank file lists one host per rank, the batch host first: the first host after it runs
/// rank 0.
fn lsf_rankfile_main_host(path: &str) -> PlanResult<String> {
    let bad = |why: String| FlagError::new("LSB_DJOB_RANKFILE", path, why);
    if path.trim().is_empty() {
        return Err(bad(
            "expected the path of LSF's rank file; it is empty".into()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("cannot read the rank file: {e}")))?;
    let hosts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    hosts
        .get(1)
        .or(hosts.first())
        .map(|h| (*h).to_owned())
        .ok_or_else(|| bad("the rank file lists no host".into()))
}

/// `LSB_MCPU_HOSTS` is `batchhost 1 host1 42 host2 42`: the first compute host runs rank 0.
fn lsf_first_compute_host(hosts: &str) -> Option<String> {
    let names: Vec<&str> = hosts.split_whitespace().step_by(2).collect();
    names.get(1).or(names.first()).map(|h| (*h).to_owned())
}

/// The variables an MPI implementation sets: world size, rank, local rank, local size.
fn mpi_variables(env: &Env) -> [&'static str; 4] {
    if has(env, "OMPI_COMM_WORLD_SIZE") {
        [
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ]
    } else {
        ["PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"]
    }
}

impl ClusterEnvironment for MpiEnvironment {
    fn name(&self) -> &str {
        "mpi"
    }
    fn description(&self) -> &str {
        "started by mpirun/mpiexec with more than one process (OpenMPI, MPICH, Intel MPI)"
    }
    /// A world of one is not an MPI run (as in Lightning): it trains as a local process.
    fn detect(&self, env: &Env) -> bool {
        let [world, rank, ..] = mpi_variables(env);
        has(env, rank) && env.get(world).and_then(|w| w.trim().parse::<usize>().ok()) > Some(1)
    }
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        let [world_var, rank_var, local_var, local_size_var] = mpi_variables(env);
        let e = "mpi";
        let world = required_usize(env, world_var, e)?;
        let global = required_usize(env, rank_var, e)?;
        let local = optional_usize(env, local_var)?.unwrap_or(0);
        let local_size = optional_usize(env, local_size_var)?.unwrap_or(world).max(1);
        default_ranks(world, global, local, global / local_size).check(world_var, rank_var)
    }
}

/// Variables torchelastic sets and a Kubeflow pod does not.
const TORCHELASTIC_ONLY: [&str; 3] = ["GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"];

impl ClusterEnvironment for KubeflowEnvironment {
    fn name(&self) -> &str {
        "kubeflow"
    }
    fn description(&self) -> &str {
        "a Kubeflow PyTorchJob: one process per pod"
    }
    fn detect(&self, env: &Env) -> bool {
        let required = [
            "KUBERNETES_PORT",
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
        ];
        required.iter().all(|k| has(env, k)) && !TORCHELASTIC_ONLY.iter().any(|k| has(env, k))
    }
    /// One process per pod: the local rank is 0, the node rank is the global rank; the
    /// operator's `MASTER_ADDR` and `MASTER_PORT` are required (and applied as for every
    /// environment).
    fn ranks(&self, env: &Env, _: usize, _: usize) -> PlanResult<Ranks> {
        let e = "kubeflow";
        for var in ["MASTER_ADDR", "MASTER_PORT"] {
            if !has(env, var) {
                return Err(FlagError::new(
                    var,
                    "",
                    format!("the {e} cluster environment needs {var} to be set"),
                ));
            }
        }
        let rank = required_usize(env, "RANK", e)?;
        default_ranks(required_usize(env, "WORLD_SIZE", e)?, rank, 0, rank)
            .check("WORLD_SIZE", "RANK")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsf_hosts_skip_the_batch_host() {
        assert_eq!(
            lsf_first_compute_host("batch 1 h1 42 h2 42").as_deref(),
            Some("h1")
        );
        assert_eq!(lsf_first_compute_host("only 4").as_deref(), Some("only"));
    }

    #[test]
    fn slurm_ports_take_the_last_four_digits() {
        assert_eq!(slurm_port(1234), 16234);
        assert_eq!(slurm_port(123456), 18456);
        assert_eq!(slurm_port(7), 15007);
    }
}
