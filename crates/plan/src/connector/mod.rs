//! The connector: a pure function from (flags, environment variables, inventory, catalog) to a
//! [`Plan`] or one clear [`FlagError`]. It touches no device and no global state.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::accelerator::AcceleratorKind;
use crate::catalog::{
    AcceleratorSpec, BUILTIN_ACCELERATOR_FEATURES, Catalog, PluginInfo, PluginKind,
};
use crate::cluster::{self, ClusterEnvironment, Env};
use crate::error::{FlagError, PlanResult, list};
use crate::flags::TrainerFlags;
use crate::inventory::Inventory;
use crate::plan::Plan;
use crate::precision::Precision;
use crate::process_group;
use crate::world;

mod plugin_args;

/// Resolves flags into a plan for this process.
pub fn connect(
    flags: &TrainerFlags,
    env: &Env,
    inventory: &Inventory,
    catalog: &Catalog,
) -> PlanResult<Plan> {
    let mut warnings = Vec::new();
    let accelerator = select_accelerator(&flags.accelerator, inventory, catalog)?;
    let devices = (accelerator.parse_devices)(&flags.devices, inventory.count(accelerator.name))
        .map_err(|m| {
            FlagError::new(
                "--trainer.devices",
                flags.devices.to_string(),
                format!("{m} (accelerator {})", accelerator.name),
            )
        })?;
    let num_nodes = check_num_nodes(flags.num_nodes)?;
    let chosen = select_plugins(flags, catalog)?;
    let precision = select_precision(
        chosen.precision_base().unwrap_or(&flags.precision),
        catalog,
        accelerator,
        &mut warnings,
    )?;
    crate::accelerator::check_deterministic(
        accelerator.name,
        flags.deterministic,
        accelerator.deterministic,
    )?;
    let flush_denormal =
        crate::accelerator::flush_denormal(flags.flush_denormal, accelerator.kind)?;
    let environment = match chosen.environment {
        Some(chosen) => chosen,
        None => cluster::detect(&catalog.cluster_environments, env).ok_or_else(|| {
            FlagError::new(
                "--trainer.cluster_environment",
                "auto",
                "no cluster environment is registered that detects this process",
            )
        })?,
    };
    let (strategy, ranks) = world::strategy_and_ranks(
        &flags.strategy,
        catalog,
        environment.as_ref(),
        env,
        devices.len(),
        num_nodes,
    )?;
    let distributed = catalog.strategy(&strategy).is_some_and(|s| s.distributed);
    let process_group_backend = process_group::select(
        chosen.process_group.as_deref(),
        process_group::AcceleratorSide {
            name: accelerator.name,
            device_collective: accelerator.device_collective,
        },
        &strategy,
        distributed,
    )?;
    let precision_plugin = chosen.own_precision_plugin();
    let chosen_by = chosen.by;
    let plan = Plan {
        init_args: BTreeMap::new(),
        accelerator: accelerator.name.to_owned(),
        strategy,
        devices,
        num_nodes,
        precision,
        deterministic: flags.deterministic,
        activation_checkpointing: flags.activation_checkpointing,
        flush_denormal,
        precision_plugin,
        checkpoint_io: chosen.checkpoint_io,
        process_group_backend,
        cluster_environment: environment.name().to_owned(),
        world_size: ranks.world_size,
        global_rank: ranks.global_rank,
        local_rank: ranks.local_rank,
        node_rank: ranks.node_rank,
        main_address: ranks.main_address,
        main_port: ranks.main_port,
        warnings,
    };
    let mut plan = plan;
    plan.init_args = plugin_args::for_plan(&plan, flags, catalog)?;
    check_choices(&plan, flags, catalog, &chosen_by)?;
    check_batch_size_find(flags, &plan)?;
    Ok(plan)
}

/// The batch-size finder tries sizes in one process: a run of several is refused here, before
/// a launcher starts them.
fn check_batch_size_find(flags: &TrainerFlags, plan: &Plan) -> PlanResult<()> {
    if flags.options.batch_size_find.is_none() || plan.world_size == 1 {
        return Ok(());
    }
    Err(FlagError::new(
        "--trainer.batch_size_find",
        "true",
        format!(
            "false in a run of {} processes: find the size in one process (without --trainer.devices > 1), then pass it (each rank's batch is that size)",
            plan.world_size
        ),
    ))
}

/// Which flag chose each plugin the plan runs, for the errors of their plan-time checks.
struct ChosenBy<'c> {
    precision_plugin: Option<(&'static str, &'c PluginInfo)>,
    environment: &'static str,
}

/// Asks the chosen strategy, precision plugin and cluster environment whether they can run
/// `plan`; a refusal is an error of the flag that chose them.
fn check_choices(
    plan: &Plan,
    flags: &TrainerFlags,
    catalog: &Catalog,
    chosen_by: &ChosenBy,
) -> PlanResult<()> {
    let strategy = catalog.strategy(&plan.strategy);
    if let Some(Err(why)) = strategy
        .and_then(|s| s.check.as_ref())
        .map(|c| c.check(plan))
    {
        let why = format!("strategy {} cannot run this plan: {why}", plan.strategy);
        return Err(FlagError::new("--trainer.strategy", &flags.strategy, why));
    }
    // The precision plugin the plan builds: the one chosen, else its precision's own.
    let precision_plugin = chosen_by.precision_plugin.or_else(|| {
        let plugin = catalog.plugin(plan.precision.name())?;
        Some(("--trainer.precision", plugin))
    });
    if let Some((flag, plugin)) = precision_plugin
        && let Some(Err(why)) = plugin.check.as_ref().map(|c| c.check(plan))
    {
        let why = format!(
            "precision plugin {} cannot run this plan: {why}",
            plugin.name
        );
        return Err(FlagError::new(flag, chosen_value(flags, flag), why));
    }
    let environment = catalog
        .cluster_environment(&plan.cluster_environment)
        .map(|e| e.check_plan(plan));
    if let Some(Err(why)) = environment {
        let why = format!(
            "cluster environment {} cannot run this plan: {why}",
            plan.cluster_environment
        );
        let flag = chosen_by.environment;
        return Err(FlagError::new(flag, chosen_value(flags, flag), why));
    }
    Ok(())
}

/// The value of `flag`, one of those that choose plugins, as the user gave it.
fn chosen_value(flags: &TrainerFlags, flag: &str) -> String {
    match flag {
        "--trainer.precision" => flags.precision.clone(),
        "--trainer.cluster_environment" => flags.cluster_environment.clone(),
        _ => format!("[{}]", flags.plugins.join(", ")),
    }
}

fn available_names(inventory: &Inventory, catalog: &Catalog) -> String {
    list(
        catalog
            .accelerators
            .iter()
            .filter(|a| inventory.is_available(a.name))
            .map(|a| a.name),
    )
}

fn inventory_note(inventory: &Inventory) -> String {
    inventory
        .injected_spec()
        .map(|s| format!(" (inventory injected by EMBER_INVENTORY={s})"))
        .unwrap_or_default()
}

fn select_accelerator<'c>(
    value: &str,
    inventory: &Inventory,
    catalog: &'c Catalog,
) -> PlanResult<&'c AcceleratorSpec> {
    let name = value.trim().to_ascii_lowercase();
    let err = |m: String| FlagError::new("--trainer.accelerator", value, m);
    let best = |eligible: &dyn Fn(&AcceleratorSpec) -> bool| {
        catalog
            .accelerators
            .iter()
            .filter(|a| eligible(a) && inventory.is_available(a.name))
            .max_by_key(|a| a.auto_priority.unwrap_or(0))
    };
    match name.as_str() {
        "auto" => best(&|a| a.auto_priority.is_some()).ok_or_else(|| {
            err(format!(
                "no accelerator that `auto` may pick is available; available: {}{}",
                available_names(inventory, catalog),
                inventory_note(inventory)
            ))
        }),
        "gpu" => best(&|a| a.kind == AcceleratorKind::Gpu).ok_or_else(|| {
            err(format!(
                "no GPU accelerator is available; available accelerators: {}{}",
                available_names(inventory, catalog),
                inventory_note(inventory)
            ))
        }),
        _ => {
            let spec = catalog.accelerator(&name).ok_or_else(|| {
                let feature = BUILTIN_ACCELERATOR_FEATURES
                    .iter()
                    .find(|(builtin, _)| *builtin == name)
                    .map(|(_, feature)| {
                        format!(
                            " (`{name}` is ember's, built in by the `{feature}` feature of the `ember` crate, which this program was built without)"
                        )
                    })
                    .unwrap_or_default();
                err(format!(
                    "unknown accelerator; registered: {}{feature}",
                    catalog.accelerator_choices()
                ))
            })?;
            if !inventory.is_available(spec.name) {
                return Err(err(format!(
                    "accelerator {} is not available on this machine; available accelerators: {}{}",
                    spec.name,
                    available_names(inventory, catalog),
                    inventory_note(inventory)
                )));
            }
            Ok(spec)
        }
    }
}

fn check_num_nodes(n: i64) -> PlanResult<usize> {
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=1 << 20).contains(n))
        .ok_or_else(|| {
            FlagError::new(
                "--trainer.num_nodes",
                n.to_string(),
                "num_nodes must be a positive integer",
            )
        })
}

/// `--trainer.precision` as a named precision; the error lists the registered precision
/// plugins too (the flag selects those by name as well).
fn parse_precision(value: &str, catalog: &Catalog) -> PlanResult<Precision> {
    Precision::parse(value).map_err(|mut e| {
        let plugins = list(catalog.precision_plugin_names());
        if !plugins.is_empty() {
            e.message = format!("{}; or a registered precision plugin: {plugins}", e.message);
        }
        e
    })
}

fn select_precision(
    value: &str,
    catalog: &Catalog,
    accelerator: &AcceleratorSpec,
    warnings: &mut Vec<String>,
) -> PlanResult<Precision> {
    let asked = parse_precision(value, catalog)?;
    let mut effective = asked;
    if asked == Precision::F16Mixed && accelerator.kind == AcceleratorKind::Cpu {
        effective = Precision::Bf16Mixed;
        warnings.push(format!(
            "precision 16-mixed is not supported on {}; using bf16-mixed instead",
            accelerator.name
        ));
    }
    if !accelerator.precisions.contains(&effective) {
        let via = if effective == asked {
            String::new()
        } else {
            format!(" (it runs {asked} as {effective})")
        };
        return Err(FlagError::new(
            "--trainer.precision",
            value,
            format!(
                "accelerator {} cannot run {effective} yet{via}; it runs: {}",
                accelerator.name,
                list(accelerator.precisions.iter().map(|p| p.name()))
            ),
        ));
    }
    Ok(effective)
}

/// What `--trainer.plugins`, `--trainer.precision` and `--trainer.cluster_environment` chose
/// among the registered plugins.
struct ChosenPlugins<'c> {
    /// The checkpoint IO chosen by name.
    checkpoint_io: Option<String>,
    /// The cluster environment chosen by name.
    environment: Option<&'c Arc<dyn ClusterEnvironment>>,
    /// The process group backend chosen by name.
    process_group: Option<String>,
    /// Which flag chose what the plan's checks may refuse.
    by: ChosenBy<'c>,
}

impl<'c> ChosenPlugins<'c> {
    /// The named precision the chosen precision plugin builds on.
    fn precision_base(&self) -> Option<&'c str> {
        match self.by.precision_plugin?.1.kind {
            PluginKind::Precision(base) => Some(base.name()),
            PluginKind::CheckpointIo => None,
        }
    }

    /// The chosen precision plugin when it has a name of its own (a named precision's own
    /// plugin is the plan's default for that precision, left unnamed).
    fn own_precision_plugin(&self) -> Option<String> {
        let (_, info) = self.by.precision_plugin?;
        info.is_own_precision_plugin().then(|| info.name.clone())
    }
}

fn select_plugins<'c>(flags: &TrainerFlags, catalog: &'c Catalog) -> PlanResult<ChosenPlugins<'c>> {
    let mut chosen = ChosenPlugins {
        checkpoint_io: None,
        environment: None,
        process_group: None,
        by: ChosenBy {
            precision_plugin: None,
            environment: "--trainer.cluster_environment",
        },
    };
    let env_choice = flags.cluster_environment.trim().to_ascii_lowercase();
    if env_choice != "auto" {
        chosen.environment = Some(catalog.cluster_environment(&env_choice).ok_or_else(|| {
            FlagError::new(
                "--trainer.cluster_environment",
                &flags.cluster_environment,
                format!(
                    "unknown cluster environment; allowed: auto, {}",
                    list(catalog.cluster_environment_names())
                ),
            )
        })?);
    }
    let precision = flags.precision.trim().to_ascii_lowercase();
    let named_precision = catalog.own_precision_plugin(&precision);
    let given = flags
        .plugins
        .iter()
        .map(|n| ("--trainer.plugins", n.as_str()));
    let from_precision = named_precision.map(|p| ("--trainer.precision", p.name.as_str()));
    refuse_repeats(&flags.plugins)?;
    for (flag, value) in from_precision.into_iter().chain(given) {
        let name = value.trim().to_ascii_lowercase();
        let clash = |what: &str, first: &str| {
            FlagError::new(
                flag,
                value,
                format!("a run takes one {what}, but both {first} and {name} were given"),
            )
        };
        if catalog.process_group_backends().contains(&name.as_str()) {
            if let Some(first) = &chosen.process_group
                && *first != name
            {
                return Err(clash("process group backend", first));
            }
            chosen.process_group = Some(name.clone());
            continue;
        }
        if let Some(environment) = catalog.cluster_environment(&name) {
            match chosen.environment {
                Some(e) if e.name() != environment.name() => {
                    return Err(clash("cluster environment", e.name()));
                }
                _ => {
                    chosen.environment = Some(environment);
                    chosen.by.environment = flag;
                }
            }
            continue;
        }
        let info = catalog.plugin(&name).ok_or_else(|| {
            FlagError::new(
                flag,
                value,
                format!("unknown plugin; allowed: {}", catalog.plugin_choices()),
            )
        })?;
        match info.kind {
            PluginKind::Precision(_) => match chosen.by.precision_plugin {
                Some((_, first)) if first.name != info.name => {
                    return Err(clash("precision plugin", &first.name));
                }
                _ => chosen.by.precision_plugin = Some((flag, info)),
            },
            PluginKind::CheckpointIo => match &chosen.checkpoint_io {
                Some(first) if *first != info.name => return Err(clash("checkpoint IO", first)),
                _ => chosen.checkpoint_io = Some(info.name.clone()),
            },
        }
    }
    // A precision plugin from --trainer.plugins sets the precision unless the flag asks for
    // another one than the default.
    if let (Some((_, info)), Some(base), None) = (
        chosen.by.precision_plugin,
        chosen.precision_base(),
        named_precision,
    ) {
        let plugin = &info.name;
        let asked = parse_precision(&flags.precision, catalog)?;
        if asked != Precision::F32True && asked.name() != base {
            return Err(FlagError::new(
                "--trainer.precision",
                &flags.precision,
                format!(
                    "precision plugin {plugin} (--trainer.plugins) runs {base}; leave --trainer.precision unset or set it to {base}"
                ),
            ));
        }
    }
    Ok(chosen)
}

/// A name given twice in `--trainer.plugins` is a mistake (a run takes one of each kind), not
/// a request to be quietly reduced to one.
fn refuse_repeats(names: &[String]) -> PlanResult<()> {
    let lower: Vec<String> = names
        .iter()
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for (i, name) in lower.iter().enumerate() {
        if lower[..i].contains(name) {
            return Err(FlagError::new(
                "--trainer.plugins",
                format!("[{}]", names.join(", ")),
                format!("{name} is named twice; name each plugin once"),
            ));
        }
    }
    Ok(())
}
