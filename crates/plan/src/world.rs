//! The processes of a run: which strategy the flags select, and this process's place among
//! the processes it runs (one per device, or one per node for a strategy that drives all of
//! a node's devices).

use crate::catalog::Catalog;
use crate::cluster::{self, ClusterEnvironment, Env, Ranks};
use crate::error::{FlagError, PlanResult};
use crate::strategy::{DDP, SINGLE_DEVICE};

/// The strategy `--trainer.strategy` (`value`) selects for `devices` devices on each of
/// `num_nodes` nodes, and this process's ranks under it, checked against what an environment
/// that started the processes started.
pub(crate) fn strategy_and_ranks(
    value: &str,
    catalog: &Catalog,
    environment: &dyn ClusterEnvironment,
    env: &Env,
    devices: usize,
    num_nodes: usize,
) -> PlanResult<(String, Ranks)> {
    let ranks = cluster::resolve_ranks(environment, env, devices, num_nodes)?;
    let strategy = select_strategy(value, catalog, devices, num_nodes, ranks.world_size)?;
    // One process per device, or one per node driving all of them.
    let (ranks, processes_per_node) = match catalog.strategy(&strategy) {
        Some(s) if s.one_process_per_node => {
            (cluster::resolve_ranks(environment, env, 1, num_nodes)?, 1)
        }
        _ => (ranks, devices),
    };
    check_world(environment, &ranks, processes_per_node, num_nodes)?;
    Ok((strategy, ranks))
}

/// Under an environment that started the processes, the flags must describe the same world.
fn check_world(
    environment: &dyn ClusterEnvironment,
    ranks: &Ranks,
    devices: usize,
    num_nodes: usize,
) -> PlanResult<()> {
    if !environment.creates_processes_externally() {
        return Ok(());
    }
    environment.validate(devices)?;
    let asked = devices * num_nodes;
    if asked != ranks.world_size {
        return Err(FlagError::new(
            "--trainer.devices",
            devices.to_string(),
            format!(
                "devices × num_nodes = {devices} × {num_nodes} = {asked} processes, but the {} environment started {}; set --trainer.devices to the processes per node and --trainer.num_nodes to the number of nodes",
                environment.name(),
                ranks.world_size
            ),
        ));
    }
    Ok(())
}

fn select_strategy(
    value: &str,
    catalog: &Catalog,
    devices: usize,
    num_nodes: usize,
    world: usize,
) -> PlanResult<String> {
    let name = value.trim().to_ascii_lowercase();
    let many = devices * num_nodes > 1 || world > 1;
    if name == "auto" {
        return Ok(if many { DDP } else { SINGLE_DEVICE }.to_owned());
    }
    let info = catalog.strategy(&name).ok_or_else(|| {
        FlagError::new(
            "--trainer.strategy",
            value,
            format!(
                "unknown strategy; registered: {}",
                catalog.strategy_choices()
            ),
        )
    })?;
    if !info.distributed && many {
        return Err(FlagError::new(
            "--trainer.strategy",
            value,
            format!(
                "{} runs one process on one device, but the run has {devices} device(s) × {num_nodes} node(s); use --trainer.strategy=ddp or --trainer.devices=1",
                info.name
            ),
        ));
    }
    Ok(info.name.clone())
}
