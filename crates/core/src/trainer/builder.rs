//! Building a Trainer: the plan's names (or values given in Rust) turned into a connected
//! strategy, precision plugin and checkpoint IO.

use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context;
use burn::tensor::backend::{AutodiffBackend, BackendTypes};

use super::Trainer;
use crate::accelerator::Accelerator;
use crate::callbacks::BuiltCallbacks;
use crate::checkpoint_io::{AsyncCheckpointIO, CheckpointIO, LocalCheckpointIO};
use crate::cluster::ClusterEnvironment;
use crate::collective::{Collective, SingleProcess};
use crate::context::RunContext;
use crate::options::{CheckpointWrites, TrainerOptions};
use crate::plan::Plan;
use crate::plugins::dtype;
use crate::plugins::lockstep::{Lockstep, LockstepDevice};
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::strategy::{Strategy, StrategyFactory, StrategyParts};
use crate::registered::Plugins;

/// A plugin given to [`TrainerBuilder::plugins`], as Lightning's `Trainer(plugins=[...])`
/// takes them. (A cluster environment decides the plan's ranks, so it is registered on the
/// `Registry` instead: the plan exists before the Trainer.)
pub enum Plugin {
    /// The precision plugin.
    Precision(Box<dyn PrecisionPlugin>),
    /// How checkpoints are written and read.
    CheckpointIo(Arc<dyn CheckpointIO>),
}

impl Plugin {
    /// A precision plugin.
    pub fn precision(plugin: impl PrecisionPlugin + 'static) -> Self {
        Plugin::Precision(Box::new(plugin))
    }

    /// A checkpoint IO.
    pub fn checkpoint_io(io: impl CheckpointIO + 'static) -> Self {
        Plugin::CheckpointIo(Arc::new(io))
    }

    fn kind(&self) -> &'static str {
        match self {
            Plugin::Precision(_) => "precision plugin",
            Plugin::CheckpointIo(_) => "checkpoint IO",
        }
    }
}

/// Builds a [`Trainer`] from a plan, taking any of its parts as values instead of by name.
pub struct TrainerBuilder {
    plan: Plan,
    /// What builds the parts the plan names.
    plugins: Rc<Plugins>,
    options: TrainerOptions,
    strategy: Option<StrategyFactory>,
    precision: Option<Box<dyn PrecisionPlugin>>,
    checkpoint_io: Option<Arc<dyn CheckpointIO>>,
    collective: Option<Rc<dyn Collective>>,
    /// The plan's cluster environment, for requeueing the job after a SIGUSR1 stop.
    cluster: Option<Arc<dyn ClusterEnvironment>>,
    /// A second plugin of one kind, refused when the Trainer is built.
    clash: Option<&'static str>,
    /// The options' callbacks, built already (else the Trainer builds them).
    callbacks: BuiltCallbacks,
}

impl TrainerBuilder {
    pub(super) fn new(context: &RunContext, options: TrainerOptions) -> Self {
        Self {
            plan: context.plan.clone(),
            plugins: Rc::clone(&context.plugins),
            options,
            strategy: None,
            precision: None,
            checkpoint_io: None,
            collective: context.collective.clone(),
            cluster: context.cluster.clone(),
            clash: None,
            callbacks: BuiltCallbacks::default(),
        }
    }

    /// The callbacks the options name, built already (the CLI builds them once while planning,
    /// where a bad one is refused): the Trainer takes them instead of building its own from
    /// the options; taken by another Trainer before, they are built again.
    pub fn callbacks(mut self, built: BuiltCallbacks) -> Self {
        self.callbacks = built;
        self
    }

    /// Plugins by value (instead of the plan's `plugins` names): at most one of each kind,
    /// counting those given with [`precision`](Self::precision) and
    /// [`checkpoint_io`](Self::checkpoint_io).
    pub fn plugins(mut self, plugins: impl IntoIterator<Item = Plugin>) -> Self {
        for plugin in plugins {
            let kind = plugin.kind();
            let taken = match plugin {
                Plugin::Precision(p) => self.precision.replace(p).is_some(),
                Plugin::CheckpointIo(io) => self.checkpoint_io.replace(io).is_some(),
            };
            if taken {
                self.clash.get_or_insert(kind);
            }
        }
        self
    }

    /// The strategy, built over the parts the Trainer connects (instead of `plan.strategy`).
    pub fn strategy(
        mut self,
        factory: impl Fn(StrategyParts) -> anyhow::Result<Box<dyn Strategy>> + 'static,
    ) -> Self {
        self.strategy = Some(Arc::new(factory));
        self
    }

    /// The precision plugin (instead of the plan's). Its named precision should be the plan's,
    /// which the connector checked against the accelerator.
    pub fn precision(self, plugin: impl PrecisionPlugin + 'static) -> Self {
        self.plugins([Plugin::precision(plugin)])
    }

    /// How checkpoints are written and read (instead of `checkpoint_io` / the plan's plugin).
    pub fn checkpoint_io(self, io: impl CheckpointIO + 'static) -> Self {
        self.plugins([Plugin::checkpoint_io(io)])
    }

    /// The collective between the run's processes (instead of the context's): a program that
    /// joins its ranks itself passes it here.
    pub fn collective(mut self, collective: Rc<dyn Collective>) -> Self {
        self.collective = Some(collective);
        self
    }

    /// The Trainer, on the device of accelerator `A` this process drives.
    pub fn build<A: Accelerator>(self) -> anyhow::Result<Trainer<A::Backend>> {
        let Self {
            plan,
            plugins,
            options,
            strategy,
            precision,
            checkpoint_io,
            collective,
            cluster,
            clash,
            callbacks,
        } = self;
        if let Some(kind) = clash {
            anyhow::bail!("Trainer::builder was given two of one kind of plugin: a {kind} twice");
        }
        // The connector checked its plan against the accelerator it named; a plan made by
        // hand is checked against the accelerator built here.
        crate::accelerator::check_deterministic(A::name(), plan.deterministic, A::deterministic)?;
        A::install_kernels();
        let device = if plan.drives_every_device() {
            A::spanning_device(&plan.devices).map_err(|why| {
                anyhow::anyhow!(
                    "strategy {} cannot drive devices {:?}: {why}",
                    plan.strategy,
                    plan.devices
                )
            })?
        } else {
            A::parallel_devices(&[plan.local_device()])
                .into_iter()
                .next()
                .context("the accelerator returned no device")?
        };
        let given = GivenParts {
            precision,
            checkpoint_io,
            collective,
        };
        let (mut parts, lockstep) = parts(&plan, &options, &plugins, given)?;
        if plan.process_group_backend.is_some()
            && plan.process_group_backend.as_deref() == A::device_collective_name()
        {
            let host = Rc::clone(&parts.collective);
            let device_collective = A::device_collective(host, &device)?;
            parts.device_collective = Some(match lockstep {
                Some(host) => Box::new(LockstepDevice::<DeviceTensor<A>>::new(
                    device_collective,
                    host,
                )),
                None => device_collective,
            });
        }
        dtype::apply::<A::Backend>(&device, parts.precision.precision())?;
        let strategy = match strategy {
            Some(factory) => factory(parts)?,
            None => plugins.strategy(&plan.strategy, parts)?,
        };
        let mut trainer =
            Trainer::with_strategy(device, options, strategy, plugins, callbacks.take())?;
        trainer.device_stats = A::device_stats;
        trainer.batch_scope = A::batch_scope;
        trainer.cluster = cluster;
        Ok(trainer)
    }
}

/// The float tensor primitive a device collective of accelerator `A` sums (its inner backend's).
type DeviceTensor<A> =
    <<<A as Accelerator>::Backend as AutodiffBackend>::InnerBackend as BackendTypes>::FloatTensorPrimitive;

/// What the builder was given as values.
#[derive(Default)]
pub(super) struct GivenParts {
    precision: Option<Box<dyn PrecisionPlugin>>,
    checkpoint_io: Option<Arc<dyn CheckpointIO>>,
    collective: Option<Rc<dyn Collective>>,
}

/// The parts every strategy gets: what was given, else what the plan names. With more than
/// one process the collective is checked to stay in step ([`Lockstep`], also returned for the
/// device collective's calls).
pub(super) fn parts(
    plan: &Plan,
    options: &TrainerOptions,
    plugins: &Plugins,
    given: GivenParts,
) -> anyhow::Result<(StrategyParts, Option<Rc<Lockstep>>)> {
    let GivenParts {
        precision,
        checkpoint_io,
        collective,
    } = given;
    let precision = match precision {
        Some(plugin) => plugin,
        None => plugins.precision(plan)?,
    };
    // Local files unless one was given or named; either way `--trainer.checkpoint_writes=async`
    // (the default) then writes through it on a background thread.
    let checkpoint_io = match checkpoint_io {
        Some(io) => io,
        None => plugins
            .checkpoint_io(plan)?
            .unwrap_or_else(|| Arc::new(LocalCheckpointIO)),
    };
    let checkpoint_io = match options.checkpoint_writes {
        CheckpointWrites::Async => Arc::new(AsyncCheckpointIO::wrapping(checkpoint_io)),
        CheckpointWrites::Sync => checkpoint_io,
    };
    let collective = match collective {
        Some(collective) => collective,
        None if plan.world_size > 1 => anyhow::bail!(
            "the plan has {} processes but the Trainer was given no collective: run through ember's Cli with a \
             distributed engine, or join one (e.g. ember_mpi::MpiEngine) and pass it to Trainer::builder(..).collective(..)",
            plan.world_size
        ),
        None => Rc::new(SingleProcess),
    };
    let lockstep =
        (collective.world_size() > 1).then(|| Rc::new(Lockstep::new(Rc::clone(&collective))));
    let collective = match &lockstep {
        Some(lockstep) => Rc::clone(lockstep) as Rc<dyn Collective>,
        None => collective,
    };
    let parts = StrategyParts {
        plan: plan.clone(),
        collective,
        precision,
        checkpoint_io,
        bucket_cap_bytes: (options.ddp_bucket_cap_mb * 1024.0 * 1024.0) as usize,
        sync_batchnorm: options.sync_batchnorm,
        device_collective: None,
    };
    Ok((parts, lockstep))
}
