//! What a job runs in: its plan, the collective that joins its ranks, and the strategies and
//! plugins registered by name. The registry hands it to the job and the job to the Trainer's
//! builder, so a flag reaches the object that uses it through parameters alone.

use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::{ClusterEnvironment, builtin_environments};
use crate::collective::Collective;
use crate::plan::Plan;
use crate::registered::Plugins;

/// A job's plan, collective and registered plugins.
#[derive(Clone)]
pub struct RunContext {
    /// What the connector decided.
    pub plan: Plan,
    /// The collective joining the run's ranks; `None` for one process.
    pub collective: Option<Rc<dyn Collective>>,
    /// Strategies, precision plugins, checkpoint IOs, callbacks and loggers by name (ember's
    /// own and whatever the registry added).
    pub(crate) plugins: Rc<Plugins>,
    /// The cluster environment the plan names (`None` for one the registry does not hold):
    /// what asks the scheduler to requeue the job after a SIGUSR1 stop.
    pub cluster: Option<Arc<dyn ClusterEnvironment>>,
}

impl RunContext {
    /// One process with ember's own plugins only: a program that drives the Trainer itself.
    pub fn local(plan: Plan) -> Self {
        let cluster = builtin_environments()
            .into_iter()
            .find(|e| e.name() == plan.cluster_environment);
        Self {
            plan,
            collective: None,
            plugins: Rc::new(Plugins::builtin()),
            cluster,
        }
    }
}
