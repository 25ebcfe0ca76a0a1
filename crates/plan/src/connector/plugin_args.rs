//! The `init_args` given with plugins chosen by name, matched to the plugins a plan runs and
//! checked against what each declared (see [`crate::init_args`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::error::{FlagError, PlanResult, render};
use crate::flags::TrainerFlags;
use crate::plan::Plan;

/// The `init_args` given with the plugins `plan` runs, by plugin name, each checked against the
/// arguments its plugin declared; arguments for a plugin that takes none, for a kind that takes
/// none (cluster environments, process group backends) or for a plugin the plan
/// does not run are errors of the flag that gave them.
pub(super) fn for_plan(
    plan: &Plan,
    flags: &TrainerFlags,
    catalog: &Catalog,
) -> PlanResult<BTreeMap<String, Value>> {
    let mut taken = BTreeMap::new();
    for (name, args) in flags.init_args.iter() {
        let flag = giving_flag(flags, name);
        let refused = |why: String| FlagError::new(flag, name, why);
        let declared = if name == plan.strategy {
            catalog.strategy(name).map(|s| s.args)
        } else if plan.precision_plugin.as_deref() == Some(name)
            || plan.precision.name() == name
            || plan.checkpoint_io.as_deref() == Some(name)
        {
            catalog.plugin(name).map(|p| p.args)
        } else if name == plan.cluster_environment
            || plan.process_group_backend.as_deref() == Some(name)
        {
            Some(None)
        } else {
            return Err(refused(format!(
                "init_args for {name}, which this plan does not run (it runs strategy {}, precision {}, cluster environment {})",
                plan.strategy,
                plan.precision_plugin
                    .as_deref()
                    .unwrap_or(plan.precision.name()),
                plan.cluster_environment
            )));
        };
        match declared.flatten() {
            Some(check) => check
                .check(args)
                .map_err(|e| refused(format!("bad init_args for {name}: {e}")))?,
            None => {
                return Err(refused(format!(
                    "{name} takes no init_args (given {}); a plugin declares the ones it takes when it is registered (`with_args`)",
                    render(args)
                )));
            }
        }
        taken.insert(name.to_owned(), args.clone());
    }
    // A plugin that declared arguments and was given none reads them as an empty table: one
    // with a required argument is refused here too, not when it is built.
    let precision = plan
        .precision_plugin
        .as_deref()
        .unwrap_or(plan.precision.name());
    let declared = [
        catalog.strategy(&plan.strategy).and_then(|s| s.args),
        catalog.plugin(precision).and_then(|p| p.args),
        (plan.checkpoint_io.as_deref()).and_then(|io| catalog.plugin(io)?.args),
    ];
    let names = [
        Some(plan.strategy.as_str()),
        Some(precision),
        plan.checkpoint_io.as_deref(),
    ];
    for (name, check) in names.into_iter().zip(declared) {
        if let (Some(name), Some(check)) = (name, check)
            && !taken.contains_key(name)
        {
            check.check(&serde_json::json!({})).map_err(|e| {
                FlagError::new(
                    giving_flag(flags, name),
                    name,
                    format!("bad init_args for {name} (none given): {e}"),
                )
            })?;
        }
    }
    Ok(taken)
}

/// The flag that named plugin `name` (lowercase).
fn giving_flag(flags: &TrainerFlags, name: &str) -> &'static str {
    let named = |value: &str| value.trim().eq_ignore_ascii_case(name);
    if named(&flags.strategy) {
        "--trainer.strategy"
    } else if named(&flags.precision) {
        "--trainer.precision"
    } else if named(&flags.cluster_environment) {
        "--trainer.cluster_environment"
    } else {
        "--trainer.plugins"
    }
}
