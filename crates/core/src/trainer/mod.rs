//! The Trainer: it owns the loops (fit, validate, test, predict), as Lightning's does.
//!
//! A user writes a model ([`LightningModule`](module::LightningModule),
//! [`TrainingModule`]) and a [`DataModule`] once; the Trainer runs them on the device the plan selected, with the
//! loop options of [`TrainerOptions`], calling [`Callback`]s at Lightning's hook points and
//! writing through [`Loggers`] and [`CheckpointIO`]. See `docs/trainer.md`.

mod agree;
mod builder;
pub mod checkpoint;
pub(crate) mod ckpt_path;
pub mod collector;
pub mod data;
mod evaluate;
pub mod freezing;
pub mod hparams;
pub mod log;
pub(crate) mod loops;
pub mod lr_find;
pub mod module;
pub mod profiler;
mod requeue;

mod run;
pub(crate) mod signals;
pub mod stack;
pub(crate) mod state_gather;
pub mod summary;
pub(crate) mod weights;

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use burn::tensor::backend::AutodiffBackend;
use serde_json::Value;

use crate::accelerator::{Accelerator, DeviceStats};
pub use crate::agreed::AgreedError;
use crate::callbacks::{Callback, ModelCheckpoint, ProgressBar, Timer, TimerConfig};
use crate::checkpoint_io::CheckpointIO;
use crate::cluster::ClusterEnvironment;
use crate::collective::Collective;
use crate::context::RunContext;
use crate::error::FlagError;
use crate::loggers::{Logger, Loggers};
use crate::nn::Recomputing;
use crate::options::TrainerOptions;
use crate::plan::Plan;
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::scaler::GradScaler;
use crate::plugins::shard::Shard;
use crate::plugins::strategy::Strategy;
use crate::registered::Plugins;
use crate::stage::Stage;
pub use builder::{Plugin, TrainerBuilder};
use data::{BatchScope, DataModule, FromDataModule, Loader};
use loops::fit::FitLoop;
use loops::reload::{self, FitLoaders, MakeLoaders, TrainAndVal};
use loops::schedule::FitSchedule;
use module::{BatcherFor, TrainingModule};
use profiler::Profiler;
pub use weights::materialize;

/// The inner (non-autodiff) backend of `B`, where evaluation runs.
type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// What `fit` starts from once its checks passed.
struct FitInputs<I> {
    loaders: TrainAndVal<I>,
    /// The epoch the data module was told when it made them.
    made_for: u64,
    schedule: FitSchedule,
    /// The checkpoint to continue from, read.
    resume_from: Option<(PathBuf, checkpoint::Checkpoint)>,
}

/// What `fit` returns.
#[derive(Debug)]
pub struct FitOutcome<M> {
    /// The trained model.
    pub model: M,
    /// Optimizer steps taken in all, the resumed checkpoint's included.
    pub global_step: u64,
    /// Optimizer steps this fit took (`global_step` less the step it resumed from).
    pub steps: u64,
    /// Epochs run (the last one possibly cut short).
    pub epochs: u64,
    /// Wall time of the fit loop, sanity check included.
    pub seconds: f64,
    /// The latest value of every metric.
    pub metrics: BTreeMap<String, f64>,
    /// The best (or latest) checkpoint written, if any.
    pub best_model_path: Option<PathBuf>,
    /// The run's log directory, if it logged.
    pub log_dir: Option<PathBuf>,
    /// Whether a callback (e.g. EarlyStopping) stopped the run.
    pub stopped_early: bool,
    /// The checkpoint written when a stop signal (SIGTERM, SIGUSR1, SIGINT) ended the run.
    pub interrupted: Option<PathBuf>,
}

/// Runs models on the device this process drives, through a [`Strategy`] that owns the
/// precision plugin, the checkpoint IO and the collective between processes.
pub struct Trainer<B: AutodiffBackend> {
    device: B::Device,
    options: TrainerOptions,
    seed: u64,
    strategy: Box<dyn Strategy>,
    callbacks: Vec<Box<dyn Callback>>,
    extra_loggers: Vec<Box<dyn Logger>>,
    loggers: Option<Loggers>,
    /// The loggers (and callbacks) registered by name that the options may name.
    plugins: Rc<Plugins>,
    hparams: Value,
    device_stats: fn(&B::Device) -> DeviceStats,
    /// Told around each batch the loops make (the accelerator's; by default nothing).
    batch_scope: BatchScope<B::Device>,
    /// Times the phases of each entry point (`--trainer.profiler`; off by default).
    profiler: Profiler,
    /// The plan's cluster environment, which may requeue the job after a SIGUSR1 stop.
    cluster: Option<Arc<dyn ClusterEnvironment>>,
    /// Whether `fit` has acted on `max_time` (added its Timer, or warned that the callbacks
    /// have one); a later fit keeps what the first did.
    max_time_handled: bool,
}

impl<B: AutodiffBackend> Trainer<B> {
    /// A Trainer for the device this process drives under `plan`, on accelerator `A`, with the
    /// built-in strategy, precision plugin and checkpoint IO the plan names, in one process
    /// (see [`builder_for`](Self::builder_for) for a job's context, [`TrainerBuilder`] to give
    /// parts as values).
    ///
    /// It refuses `deterministic=true` where the accelerator has no deterministic mode, makes
    /// the precision's compute type the device's float type, and seeds the
    /// backend, so a model built right after it starts from the seed's weights in that type.
    pub fn new<A: Accelerator<Backend = B>>(
        plan: &Plan,
        options: TrainerOptions,
    ) -> anyhow::Result<Self> {
        Self::builder(plan, options).build::<A>()
    }

    /// A builder that takes a strategy, a precision plugin, a checkpoint IO or a collective
    /// as values, as Lightning's `Trainer(strategy=..., plugins=[...])` does; what is not
    /// given comes from the built-ins the plan names, in one process.
    pub fn builder(plan: &Plan, options: TrainerOptions) -> TrainerBuilder {
        Self::builder_for(&RunContext::local(plan.clone()), options)
    }

    /// A builder in a job's context (what [`Job::run`](crate::job::Job::run) is given): its
    /// plan, its collective, and the strategies and plugins registered by name, which build
    /// what the plan names unless the builder is given values.
    pub fn builder_for(context: &RunContext, options: TrainerOptions) -> TrainerBuilder {
        TrainerBuilder::new(context, options)
    }

    /// The run's strategy.
    pub fn strategy(&self) -> &dyn Strategy {
        self.strategy.as_ref()
    }

    /// The strategy's precision plugin.
    pub fn precision(&self) -> &dyn PrecisionPlugin {
        self.strategy.parts().precision.as_ref()
    }

    /// The run's collective, for user code that needs `barrier`, `broadcast`, `all_gather` or
    /// a reduction; in a one-process run every operation is the identity.
    pub fn collective(&self) -> &dyn Collective {
        self.strategy.collective()
    }

    /// The collective of a run with more than one process.
    fn ranks(&self) -> Option<&dyn Collective> {
        let collective = self.strategy.collective();
        (collective.world_size() > 1).then_some(collective)
    }

    fn is_global_zero(&self) -> bool {
        self.strategy.is_global_zero()
    }

    /// The checkpoint `ckpt_path` names (`last` and `best` looked up in the run's checkpoint
    /// directories), read and decoded, if one is set. One that cannot be found or read is bad
    /// input, refused naming the flag.
    fn resume_checkpoint(&self) -> anyhow::Result<Option<(PathBuf, checkpoint::Checkpoint)>> {
        let Some(option) = &self.options.ckpt_path else {
            return Ok(None);
        };
        let dirs = ckpt_path::search_dirs(
            &self.options.default_root_dir,
            self.callbacks.iter().filter_map(|c| c.checkpoint_dirpath()),
        );
        let refuse = |e: anyhow::Error| {
            let allowed = format!("{e:#}; give a checkpoint file, `last` or `best`");
            FlagError::new("--trainer.ckpt_path", option.display().to_string(), allowed)
        };
        let Some(chosen) = ckpt_path::resolve(option, &dirs).map_err(refuse)? else {
            if self.is_global_zero() {
                eprintln!(
                    "--trainer.ckpt_path=last: no checkpoint yet under {}; starting without one",
                    self.options.default_root_dir.display()
                );
            }
            return Ok(None);
        };
        let path = chosen.path;
        let read = (self.checkpoint_io().load(&path))
            .and_then(|bytes| checkpoint::Checkpoint::decode(&bytes, &path));
        let checkpoint = read.map_err(refuse)?;
        if self.is_global_zero() && path.as_path() != option.as_path() {
            eprintln!(
                "--trainer.ckpt_path={}: using {}\n  ({})",
                option.display(),
                path.display(),
                chosen.why
            );
        }
        Ok(Some((path, checkpoint)))
    }

    /// The share of every epoch this process sees.
    fn shard(&self) -> Shard {
        self.strategy.shard()
    }

    /// How loaders are sharded and sized for the strategy: this process's share of each
    /// epoch, `batch_size` items per device it drives.
    fn loader_sizing(&self) -> (Shard, usize) {
        (self.shard(), self.strategy.devices_per_process())
    }

    /// `loaders` (of loop `which`) checked, sharded and sized for the strategy.
    fn strategy_loaders<I>(
        &self,
        loaders: Vec<Loader<I>>,
        which: &str,
    ) -> anyhow::Result<Vec<Loader<I>>> {
        Loader::for_strategy(loaders, which, self.loader_sizing())
    }

    /// A Trainer on `device` of accelerator `A`, as [`on_device`](Self::on_device) builds one,
    /// with `A`'s device stats, batch scope ([`Accelerator::batch_scope`]: xla ends a step
    /// and splits a batch there) and kernels ([`Accelerator::install_kernels`]).
    pub fn on_accelerator<A: Accelerator<Backend = B>>(
        device: B::Device,
        options: TrainerOptions,
    ) -> anyhow::Result<Self> {
        A::install_kernels();
        let mut trainer = Self::on_device(device, options)?;
        trainer.device_stats = A::device_stats;
        trainer.batch_scope = A::batch_scope;
        Ok(trainer)
    }

    /// A Trainer on `device` with no accelerator behind it (no device stats, no batch scope,
    /// one process, 32-true, `single_device`, host floats flushed as [`Plan::local`] says; a
    /// program that wants another choice builds with [`Trainer::builder`] and a plan of its
    /// own, or [`on_accelerator`](Self::on_accelerator)).
    pub fn on_device(device: B::Device, options: TrainerOptions) -> anyhow::Result<Self> {
        let plan = Plan::local("", ember_plan::precision::Precision::F32True);
        let plugins = Rc::new(Plugins::builtin());
        let (parts, _) = builder::parts(&plan, &options, &plugins, Default::default())?;
        let strategy = Box::new(crate::plugins::strategy::SingleDevice::new(parts));
        Self::with_strategy(device, options, strategy, plugins, None)
    }

    /// A Trainer on `device` run by `strategy`: the seed (rank 0's when there are several
    /// processes) seeds the backend, and the callbacks of the options are `built` already or
    /// built here.
    fn with_strategy(
        device: B::Device,
        options: TrainerOptions,
        strategy: Box<dyn Strategy>,
        plugins: Rc<Plugins>,
        built: Option<Vec<Box<dyn Callback>>>,
    ) -> anyhow::Result<Self> {
        options.check()?;
        // Before the backend is seeded and the model initialised, as a hand-written loop
        // that sets the mode first does; in the pool this thread computes with.
        crate::host_pool::join_compute_pool();
        crate::host_float::set_flush_denormal_everywhere(strategy.parts().plan.flush_denormal);
        crate::host_alloc::keep_freed_buffers();
        let seed = options
            .seed
            .unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        let seed = strategy.broadcast_seed(seed)?;
        B::seed(&device, seed);
        let mut callbacks = match built {
            Some(callbacks) => callbacks,
            None => crate::registered::build::callbacks(&options.callbacks, &plugins)?,
        };
        if options.enable_progress_bar && !callbacks.iter().any(|c| c.name() == "ProgressBar") {
            callbacks.push(Box::new(ProgressBar::new(Default::default())));
        }
        let synced = device.clone();
        let sync: Rc<dyn Fn()> = Rc::new(move || {
            // A backend that cannot sync has nothing queued to wait for.
            let _ = B::sync(&synced);
        });
        Ok(Self {
            profiler: Profiler::new(options.profiler, sync),
            device,
            seed,
            strategy,
            callbacks,
            extra_loggers: Vec::new(),
            loggers: None,
            plugins,
            hparams: Value::Null,
            device_stats: |_| DeviceStats::new(),
            batch_scope: |_, _| {},
            options,
            cluster: None,
            max_time_handled: false,
        })
    }

    /// The device models must be built on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The seed in effect (drawn when the options gave none).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The loop options.
    pub fn options(&self) -> &TrainerOptions {
        &self.options
    }

    /// Adds a callback written in Rust (after those from config).
    pub fn with_callback(mut self, callback: impl Callback + 'static) -> Self {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// Adds callbacks, in order.
    pub fn with_callbacks(
        mut self,
        callbacks: impl IntoIterator<Item = Box<dyn Callback>>,
    ) -> Self {
        self.callbacks.extend(callbacks);
        self
    }

    /// Replaces the loss scaler's settings (16-mixed only; other precisions have no scaler
    /// and ignore it).
    pub fn with_grad_scaler(mut self, scaler: GradScaler) -> Self {
        if let Some(held) = self.strategy.parts_mut().precision.grad_scaler_mut() {
            *held = scaler;
        }
        self
    }

    /// The loss scaler's state (16-mixed only).
    pub fn grad_scaler(&self) -> Option<&GradScaler> {
        self.precision().grad_scaler()
    }

    /// Adds a logger written in Rust.
    pub fn with_logger(mut self, logger: impl Logger + 'static) -> Self {
        self.extra_loggers.push(Box::new(logger));
        self
    }

    fn checkpoint_io(&self) -> &Arc<dyn CheckpointIO> {
        &self.strategy.parts().checkpoint_io
    }

    /// The configuration to record as hyperparameters (`hparams.yaml`).
    pub fn with_hparams(mut self, hparams: Value) -> Self {
        self.hparams = hparams;
        self
    }

    /// The run's log directory, once an entry point has created it.
    pub fn log_dir(&self) -> Option<&Path> {
        self.loggers.as_ref().and_then(Loggers::log_dir)
    }

    /// Trains `model` on `data`'s train loader, validating on its val loaders as configured.
    ///
    /// Everything that can refuse the run (flags that do not fit the model or the data, the
    /// checkpoint `ckpt_path` names) is checked first, on every rank together, before anything
    /// is written.
    pub fn fit<M, D>(&mut self, model: M, data: &mut D) -> anyhow::Result<FitOutcome<M>>
    where
        M: TrainingModule<B>,
        D: DataModule,
        D::Batcher: BatcherFor<B, D::Item, M>,
    {
        weights::materialize(&model);
        if self.options.enable_checkpointing
            && !self.callbacks.iter().any(|c| c.is_model_checkpoint())
        {
            self.callbacks
                .push(Box::new(ModelCheckpoint::new(Default::default())));
        }
        self.add_timer();
        let checked = self.check_fit(&model, data);
        let FitInputs {
            loaders,
            made_for,
            schedule,
            resume_from,
        } = self.agree(checked)?;
        let plan = &self.strategy.parts().plan;
        let recomputing = (plan.activation_checkpointing).then(Recomputing::on::<B>);
        self.find_lr_before_fit(&model, data)?;
        let mut run = self.start(Stage::Fit)?;
        if self.options.enable_model_summary && self.is_global_zero() {
            eprintln!("{}", summary::summarize(&model));
        }
        let batcher = D::Batcher::from_data_module(data);
        let sizing = self.loader_sizing();
        let make: MakeLoaders<'_, D::Item> =
            Box::new(move |epoch| reload::fit_loaders(data, epoch, sizing));
        let every = self.options.reload_dataloaders_every_n_epochs;
        let loaders = FitLoaders::new(loaders, made_for, every, make);
        let result = FitLoop::new(self, &mut run, schedule, model, resume_from)
            .and_then(|fit| fit.run(&batcher, loaders));
        if recomputing.is_some_and(|on| on.blocks_recomputed() == 0) && result.is_ok() {
            tracing::warn!(target: "ember", "--trainer.activation_checkpointing=true, but the model ran no block through ember::nn::recompute: nothing was recomputed");
        }
        crate::plugins::lockstep::at_step(None);
        self.finish(run, result)
    }

    /// Adds a Timer with `max_time` as its budget when the options set one, unless the
    /// callbacks have a Timer of their own (whose settings then win, with a warning), as
    /// Lightning does.
    fn add_timer(&mut self) {
        let Some(duration) = self.options.max_time.filter(|_| !self.max_time_handled) else {
            return;
        };
        self.max_time_handled = true;
        if self.callbacks.iter().any(|c| c.name() == "Timer") {
            tracing::warn!(
                target: "ember",
                "--trainer.max_time is ignored: the callbacks have a Timer of their own"
            );
            return;
        }
        let config = TimerConfig {
            duration: Some(duration),
            ..TimerConfig::default()
        };
        self.callbacks.push(Box::new(Timer::new(config)));
    }

    /// What `fit` needs before it starts, each refusal an error: the model's optimization
    /// checked against the flags, the data set up and its loaders sized, the schedule, and the
    /// checkpoint to resume from, read.
    fn check_fit<M, D>(&mut self, model: &M, data: &mut D) -> anyhow::Result<FitInputs<D::Item>>
    where
        M: TrainingModule<B>,
        D: DataModule,
    {
        if loops::configure::is_manual(self, model)? {
            loops::optimization::check_manual(self)?;
        }
        self.check_lr_find()?;
        data.setup(Stage::Fit)?;
        let resume_from = self.resume_checkpoint()?;
        // A resumed fit starts on the loaders an uninterrupted one used in its epoch.
        let epoch = resume_from.as_ref().map_or(0, |(_, c)| c.header.epoch);
        let made_for = reload::made_for(self.options.reload_dataloaders_every_n_epochs, epoch);
        let (train, val) = reload::fit_loaders(data, made_for, self.loader_sizing())?;
        let schedule = reload::schedule(&self.options, (&train, &val))?;
        Ok(FitInputs {
            loaders: (train, val),
            made_for,
            schedule,
            resume_from,
        })
    }

    /// Draws `curves.png` beside the csv logger's metrics.csv in `log_dir`. A failure is a
    /// warning: the run's results stand without the picture.
    fn write_curves(&self, log_dir: Option<&Path>) {
        // A run too short to log a metric has nothing to draw.
        if let Some(dir) = log_dir
            && dir.join(crate::loggers::METRICS_FILE).exists()
            && let Err(e) = crate::loggers::curves::write(dir)
        {
            eprintln!("warning: no {}: {e:#}", crate::loggers::curves::CURVES_FILE);
        }
    }
}
