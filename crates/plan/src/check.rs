//! Plan-time checks of registered plugins: a strategy, precision plugin or cluster environment
//! that cannot run a plan says so while the run is planned, so the refusal is a flag error
//! (exit 2, seen by `--print-plan`) rather than a failure once training has started.

use std::fmt;
use std::sync::Arc;

use crate::plan::Plan;

/// What a check answers: `Err(why)` refuses the plan.
pub type CheckResult = Result<(), String>;

/// A registered plugin's check of a finished plan: `Err(why)` refuses it, and the connector
/// reports `why` as an error of the flag that chose the plugin.
#[derive(Clone)]
pub struct PlanCheck(Arc<dyn Fn(&Plan) -> CheckResult>);

impl PlanCheck {
    /// A check from a closure.
    pub fn new(check: impl Fn(&Plan) -> CheckResult + 'static) -> Self {
        Self(Arc::new(check))
    }

    /// Runs the check on `plan`.
    pub fn check(&self, plan: &Plan) -> CheckResult {
        (self.0)(plan)
    }
}

impl fmt::Debug for PlanCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PlanCheck")
    }
}

/// Two checks are equal when they are the same closure.
impl PartialEq for PlanCheck {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PlanCheck {}
