//! What a job runs in: its plan, the collective that joins its ranks, and the strategies and
//! plugins registered by name. The registry hands it to the job and the job to the Trainer's
//! builder, so a flag reaches the object that uses it through parameters alone.

use std::rc::Rc;

use crate::collective::Collective;
use crate::plan::Plan;
use crate::plugins::PluginFactories;

/// A job's plan, collective and registered plugins.
#[derive(Clone)]
pub struct RunContext {
    /// What the connector decided.
    pub plan: Plan,
    /// The collective joining the run's ranks; `None` for one process.
    pub collective: Option<Rc<dyn Collective>>,
    /// Strategies, precision plugins, checkpoint IOs, callbacks and loggers by name (the
    /// built-in strategies and whatever the registry added).
    pub factories: Rc<PluginFactories>,
}

impl RunContext {
    /// One process with the built-in strategies only: a program that drives the Trainer
    /// itself.
    pub fn local(plan: Plan) -> Self {
        Self {
            plan,
            collective: None,
            factories: Rc::new(PluginFactories::default()),
        }
    }
}
