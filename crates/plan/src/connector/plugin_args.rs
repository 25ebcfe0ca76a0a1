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
/// none (cluster environments, checkpoint IO, process group backends) or for a plugin the plan
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
