//! The Trainer: it owns the loops (fit, validate, test, predict), as Lightning's does.
//!
//! A user writes a model ([`TrainingModule`], [`EvalModule`], [`PredictModule`]) and a
//! [`DataModule`] once; the Trainer runs them on the device the plan selected, with the
//! loop options of [`TrainerOptions`], calling [`Callback`]s at Lightning's hook points and
//! writing through [`Loggers`] and [`CheckpointIO`]. See `docs/trainer.md`.

pub mod checkpoint;
pub mod ckpt_path;
pub mod data;
pub mod ddp;
pub mod dtype;
pub mod grads;
pub mod log;
pub mod module;
pub mod options;
pub mod scaler;
pub mod signals;

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::module::{AutodiffModule, Module};
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::FloatDType;
use burn::tensor::backend::AutodiffBackend;
use serde_json::Value;

use crate::accelerator::{Accelerator, DeviceStats};
use crate::callbacks::{
    self, Callback, CallbackContext, ModelCheckpoint, ProgressBar, Saver, TrainerState,
};
use crate::checkpoint_io::{AsyncCheckpointIO, CheckpointIO, LocalCheckpointIO};
use crate::cli::Stage;
use crate::collective::{Collective, ReduceOp, SingleProcess};
use crate::loggers::{Logger, Loggers};
use crate::plan::Plan;
use checkpoint::{Checkpoint, Progress, record_bytes, weights_of};
use data::{DataModule, Loader, Shard};
use ddp::Ddp;
use log::{MetricCollector, StepLog};
use module::{EvalModule, Optimizers, PredictModule, SchedulerInterval, TrainingModule};
use options::{Limit, TrainerOptions};
use scaler::GradScaler;
use signals::StopSignals;

/// The inner (non-autodiff) backend of `B`, where evaluation runs.
type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// What `fit` returns.
#[derive(Debug)]
pub struct FitOutcome<M> {
    /// The trained model.
    pub model: M,
    /// Optimizer steps taken.
    pub global_step: u64,
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

/// Runs models on one device of an accelerator (multi-process strategies come later).
pub struct Trainer<B: AutodiffBackend> {
    device: B::Device,
    options: TrainerOptions,
    seed: u64,
    is_global_zero: bool,
    callbacks: Vec<Box<dyn Callback>>,
    extra_loggers: Vec<Box<dyn Logger>>,
    loggers: Option<Loggers>,
    checkpoint_io: Arc<dyn CheckpointIO>,
    hparams: Value,
    device_stats: fn(&B::Device) -> DeviceStats,
    /// The low-precision compute type under a mixed precision.
    mixed: Option<FloatDType>,
    /// Dynamic loss scaling, under 16-mixed.
    scaler: Option<GradScaler>,
    /// Data parallelism, when the run has more than one process.
    ddp: Option<Ddp>,
}

fn no_stats<D>(_: &D) -> DeviceStats {
    DeviceStats::new()
}

impl<B: AutodiffBackend> Trainer<B> {
    /// A Trainer for the device this process drives under `plan`, on accelerator `A`.
    ///
    /// It refuses `deterministic=true` where the accelerator has no deterministic mode, makes
    /// the plan's precision the device's float type (see [`dtype`]), and seeds the backend, so
    /// a model built right after it starts from the seed's weights in that type.
    pub fn new<A: Accelerator<Backend = B>>(
        plan: &Plan,
        options: TrainerOptions,
    ) -> anyhow::Result<Self> {
        crate::accelerator::check_deterministic(
            A::name(),
            options.deterministic,
            A::deterministic,
        )?;
        let device = A::parallel_devices(&[plan.local_device()])
            .into_iter()
            .next()
            .context("the accelerator returned no device")?;
        dtype::apply::<B>(&device, plan.precision)?;
        let mut trainer = Self::on_device(device, options)?;
        trainer.mixed = dtype::mixed_dtype(plan.precision);
        if plan.precision == crate::precision::Precision::F16Mixed {
            trainer.scaler = Some(GradScaler::default());
        }
        trainer.device_stats = A::device_stats;
        trainer.is_global_zero = plan.global_rank == 0;
        if plan.world_size > 1 {
            let collective = crate::collective::current().with_context(|| {
                format!(
                    "the plan has {} processes but no collective is installed on this thread: run through ember's Cli with a \
                     distributed engine, or join one (e.g. ember_mpi::MpiEngine) and call Trainer::with_collective",
                    plan.world_size
                )
            })?;
            trainer = trainer.with_collective(collective)?;
        }
        Ok(trainer)
    }

    /// Makes this Trainer one rank of a data-parallel run over `collective`: it takes rank 0's
    /// seed, trains on its shard of every epoch, starts from rank 0's weights, averages
    /// gradients before each optimizer step, and writes logs and checkpoints only on rank 0.
    pub fn with_collective(mut self, collective: Rc<dyn Collective>) -> anyhow::Result<Self> {
        if collective.world_size() < 2 {
            self.ddp = None;
            return Ok(self);
        }
        let ddp = Ddp::new(
            collective,
            (self.options.ddp_bucket_cap_mb * 1024.0 * 1024.0) as usize,
        );
        self.seed = ddp.broadcast_u64(self.seed)?;
        B::seed(&self.device, self.seed);
        self.is_global_zero = ddp.rank() == 0;
        self.ddp = Some(ddp);
        Ok(self)
    }

    /// The run's collective, for user code that needs `barrier`, `broadcast`, `all_gather` or
    /// a reduction; in a one-process run every operation is the identity ([`SingleProcess`]).
    pub fn collective(&self) -> &dyn Collective {
        self.ranks().unwrap_or(&SingleProcess)
    }

    /// The collective of a run with more than one process.
    fn ranks(&self) -> Option<&dyn Collective> {
        self.ddp.as_ref().map(|d| d.collective.as_ref())
    }

    /// The checkpoint `ckpt_path` names (`last` and `best` looked up in the run's checkpoint
    /// directories), if one is set.
    fn ckpt_path(&self) -> anyhow::Result<Option<PathBuf>> {
        let Some(option) = &self.options.ckpt_path else {
            return Ok(None);
        };
        let dirs = ckpt_path::search_dirs(
            &self.options.default_root_dir,
            self.callbacks.iter().filter_map(|c| c.checkpoint_dirpath()),
        );
        let path = ckpt_path::resolve(option, &dirs)?;
        if self.is_global_zero && path.as_path() != option.as_path() {
            eprintln!(
                "--trainer.ckpt_path={}: using {}",
                option.display(),
                path.display()
            );
        }
        Ok(Some(path))
    }

    /// The share of every epoch this process sees.
    fn shard(&self) -> Shard {
        self.ddp.as_ref().map_or(Shard::WHOLE, |d| Shard {
            rank: d.rank(),
            world: d.world_size(),
        })
    }

    /// A Trainer on `device` with no accelerator behind it (no device stats, rank 0).
    pub fn on_device(device: B::Device, options: TrainerOptions) -> anyhow::Result<Self> {
        let seed = options
            .seed
            .unwrap_or_else(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
        B::seed(&device, seed);
        let mut callbacks = callbacks::from_specs(&options.callbacks)?;
        if options.enable_progress_bar && !callbacks.iter().any(|c| c.name() == "ProgressBar") {
            callbacks.push(Box::new(ProgressBar::new(Default::default())));
        }
        Ok(Self {
            device,
            seed,
            is_global_zero: true,
            callbacks,
            extra_loggers: Vec::new(),
            loggers: None,
            checkpoint_io: if options.async_checkpointing {
                Arc::new(AsyncCheckpointIO::new(LocalCheckpointIO))
            } else {
                Arc::new(LocalCheckpointIO)
            },
            hparams: Value::Null,
            device_stats: no_stats,
            mixed: None,
            scaler: None,
            ddp: None,
            options,
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
        if self.scaler.is_some() {
            self.scaler = Some(scaler);
        }
        self
    }

    /// The loss scaler's state (16-mixed only).
    pub fn grad_scaler(&self) -> Option<&GradScaler> {
        self.scaler.as_ref()
    }

    /// Adds a logger written in Rust.
    pub fn with_logger(mut self, logger: impl Logger + 'static) -> Self {
        self.extra_loggers.push(Box::new(logger));
        self
    }

    /// Replaces how checkpoints are written.
    pub fn with_checkpoint_io(mut self, io: impl CheckpointIO + 'static) -> Self {
        self.checkpoint_io = Arc::new(io);
        self
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

    /// Trains `model` on `data`'s train loader, validating on its val loader as configured.
    pub fn fit<M, D>(&mut self, model: M, data: &mut D) -> anyhow::Result<FitOutcome<M>>
    where
        M: TrainingModule<B>,
        M::InnerModule: EvalModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<B, D::Item, M::Batch>
            + Batcher<Inner<B>, D::Item, <M::InnerModule as EvalModule<Inner<B>>>::Batch>,
    {
        if self.options.enable_checkpointing
            && !self.callbacks.iter().any(|c| c.is_model_checkpoint())
        {
            self.callbacks
                .push(Box::new(ModelCheckpoint::new(Default::default())));
        }
        data.setup(Stage::Fit)?;
        let train = data
            .train_loader()
            .context("fit needs training data: DataModule::train_loader returned None")?;
        let shard = self.shard();
        let train = train.sharded(shard);
        let val = data.val_loader().map(|v| v.sharded(shard));
        let resume_from = self.ckpt_path()?;
        let mut run = self.start(Stage::Fit)?;
        let result = self.fit_loop(
            &mut run,
            model,
            data.batcher(),
            (&train, val.as_ref()),
            resume_from,
        );
        self.finish(run, result)
    }

    /// One validation pass over `data`'s val loader; returns the epoch metrics.
    pub fn validate<M, D>(
        &mut self,
        model: M,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: EvalModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        self.evaluate(Stage::Validate, model, data)
    }

    /// One test pass over `data`'s test loader; returns the epoch metrics.
    pub fn test<M, D>(&mut self, model: M, data: &mut D) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: EvalModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        self.evaluate(Stage::Test, model, data)
    }

    /// Predictions for every batch of `data`'s predict loader, in order.
    pub fn predict<M, D>(&mut self, model: M, data: &mut D) -> anyhow::Result<Vec<M::Output>>
    where
        M: PredictModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        data.setup(Stage::Predict)?;
        let loader = data
            .predict_loader()
            .context("predict needs data: DataModule::predict_loader returned None")?;
        let model = self.load_weights(model)?;
        let mut run = self.start(Stage::Predict)?;
        let result = (|| {
            let limit = self.limit(self.options.limit_predict_batches, loader.num_batches());
            run.state.num_eval_batches = limit;
            let mut outputs = Vec::with_capacity(limit);
            for (i, indices) in loader
                .batch_indices(self.seed, 0)
                .iter()
                .take(limit)
                .enumerate()
            {
                let batch = loader.batch::<Inner<B>, _>(data.batcher(), indices, &self.device)?;
                outputs.push(model.predict_step(batch));
                run.state.batch_idx = i;
                run.hook(None, |c, x| c.on_predict_batch_end(x))?;
            }
            Ok(outputs)
        })();
        self.finish(run, result)
    }

    fn evaluate<M, D>(
        &mut self,
        stage: Stage,
        model: M,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: EvalModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        data.setup(stage)?;
        let (loader, limit) = match stage {
            Stage::Test => (data.test_loader(), self.options.limit_test_batches),
            _ => (data.val_loader(), self.options.limit_val_batches),
        };
        let loader = loader
            .with_context(|| {
                format!(
                    "{} needs data: DataModule::{}_loader returned None",
                    stage.name(),
                    if stage == Stage::Test { "test" } else { "val" }
                )
            })?
            .sharded(self.shard());
        let model = self.load_weights(model)?;
        let mut run = self.start(stage)?;
        let result = (|| {
            let limit = self.limit(limit, loader.num_batches());
            run.state.num_eval_batches = limit;
            run.hook(None, |c, x| match stage {
                Stage::Test => c.on_test_start(x),
                _ => c.on_validation_start(x),
            })?;
            let metrics =
                self.eval_pass(&mut run, &model, &loader, data.batcher(), limit, stage)?;
            run.publish(&metrics, true)?;
            run.hook(None, |c, x| match stage {
                Stage::Test => c.on_test_end(x),
                _ => c.on_validation_end(x),
            })?;
            Ok(metrics)
        })();
        self.finish(run, result)
    }

    /// `limit` batches of a loop, or `fast_dev_run` batches in a fast dev run.
    fn limit(&self, limit: Limit, available: usize) -> usize {
        match self.options.fast_dev_run {
            0 => limit.of(available),
            n => Limit::Batches(n).of(available),
        }
    }

    fn load_weights<M: Module<Inner<B>>>(&self, model: M) -> anyhow::Result<M> {
        let Some(path) = self.ckpt_path()? else {
            return Ok(model);
        };
        let bytes = self.checkpoint_io.load(&path)?;
        Checkpoint::decode(&bytes, &path)?.load_model::<Inner<B>, M>(model, &path)
    }

    /// Creates the loggers on first use and the state of one entry point; runs `setup`.
    fn start(&mut self, stage: Stage) -> anyhow::Result<Run> {
        if self.loggers.is_none() {
            let mut loggers = if self.is_global_zero && self.options.fast_dev_run == 0 {
                Loggers::create(&self.options.default_root_dir, &self.options.logger)?
            } else {
                Loggers::none()
            };
            if self.is_global_zero {
                for logger in self.extra_loggers.drain(..) {
                    loggers.push(logger);
                }
                if !self.hparams.is_null() {
                    loggers.log_hyperparams(&self.hparams)?;
                }
            }
            self.loggers = Some(loggers);
        }
        let o = &self.options;
        let state = TrainerState {
            stage: Some(stage),
            max_epochs: if o.fast_dev_run > 0 {
                1
            } else {
                o.epoch_limit()
            },
            min_epochs: o.min_epochs,
            default_root_dir: o.default_root_dir.clone(),
            log_dir: self.log_dir().map(Path::to_owned),
            is_global_zero: self.is_global_zero,
            log_every_n_steps: o.log_every_n_steps,
            fast_dev_run: o.fast_dev_run > 0,
            ..TrainerState::default()
        };
        let mut run = Run {
            state,
            loggers: self.loggers.take().unwrap_or_default(),
            callbacks: std::mem::take(&mut self.callbacks),
            device_stats: {
                let device = self.device.clone();
                let stats = self.device_stats;
                Box::new(move || stats(&device))
            },
            checkpoint_io: Arc::clone(&self.checkpoint_io),
            seed: self.seed,
            hparams: Rc::new(self.hparams.clone()),
        };
        run.hook(None, |c, x| c.setup(x))?;
        Ok(run)
    }

    /// Runs `on_exception` on failure, then `teardown`, and gives the run's parts back.
    fn finish<T>(&mut self, mut run: Run, result: anyhow::Result<T>) -> anyhow::Result<T> {
        if let Err(e) = &result {
            let _ = run.hook(None, |c, x| {
                c.on_exception(x, e);
                Ok(())
            });
        }
        let teardown = run.hook(None, |c, x| c.teardown(x));
        let written = run.checkpoint_io.wait();
        let saved = run.loggers.save();
        self.callbacks = run.callbacks;
        self.loggers = Some(run.loggers);
        let value = result?;
        teardown?;
        written?;
        saved?;
        Ok(value)
    }

    /// Batches of one evaluation pass with their batch hooks; returns the pass's epoch metrics.
    fn eval_pass<E, I, Bt>(
        &self,
        run: &mut Run,
        model: &E,
        loader: &Loader<I>,
        batcher: &Bt,
        limit: usize,
        stage: Stage,
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        E: EvalModule<Inner<B>>,
        Bt: Batcher<Inner<B>, I, E::Batch>,
    {
        let mut collector = MetricCollector::default();
        let mut log = StepLog::new(stage);
        for (i, indices) in loader
            .batch_indices(self.seed, 0)
            .iter()
            .take(limit)
            .enumerate()
        {
            let batch = loader.batch::<Inner<B>, _>(batcher, indices, &self.device)?;
            match stage {
                Stage::Test => model.test_step(batch, &mut log),
                _ => model.validation_step(batch, &mut log),
            }
            collector.collect(&mut log, false);
            run.state.batch_idx = i;
            run.hook(None, |c, x| match stage {
                Stage::Test => c.on_test_batch_end(x),
                _ => c.on_validation_batch_end(x),
            })?;
        }
        collector.take_epoch(self.ranks())
    }

    /// The model validation runs on during `fit`: the inner module, in the compute type.
    fn eval_model<M: AutodiffModule<B>>(&self, model: &M) -> M::InnerModule {
        match self.mixed {
            Some(low) => dtype::compute(model.valid(), low),
            None => model.valid(),
        }
    }

    /// The stop signal and early-stop decision every rank acts on: each rank's own in a
    /// one-process run; under ddp, a stop anywhere stops all ranks at the same batch (a rank
    /// that stopped alone would leave the others waiting in their next all-reduce).
    fn agree_on_stop(
        &self,
        signal: Option<&'static str>,
        should_stop: bool,
    ) -> anyhow::Result<(Option<&'static str>, bool)> {
        let Some(ddp) = &self.ddp else {
            return Ok((signal, should_stop));
        };
        let code = signal.map_or(0, |s| {
            1 + signals::NAMES.iter().position(|n| *n == s).unwrap_or(0)
        });
        let mut flags = [code as f64, f64::from(u8::from(should_stop))];
        ddp.collective.all_reduce_f64(&mut flags, ReduceOp::Max)?;
        let signal = (flags[0] > 0.0).then(|| signals::NAMES[flags[0] as usize - 1]);
        Ok((signal, flags[1] > 0.0))
    }

    fn fit_loop<M, I, Bt>(
        &mut self,
        run: &mut Run,
        mut model: M,
        batcher: &Bt,
        (train, val): (&Loader<I>, Option<&Loader<I>>),
        resume_from: Option<PathBuf>,
    ) -> anyhow::Result<FitOutcome<M>>
    where
        M: TrainingModule<B>,
        M::InnerModule: EvalModule<Inner<B>>,
        Bt: Batcher<B, I, M::Batch>
            + Batcher<Inner<B>, I, <M::InnerModule as EvalModule<Inner<B>>>::Batch>,
    {
        let started = Instant::now();
        let o = &self.options;
        let fast = o.fast_dev_run;
        let overfit = o.overfit_batches.of(train.num_batches());
        let mut train = train.clone();
        let (n_train, n_val) = if fast > 0 {
            (Limit::Batches(fast).of(train.num_batches()), 0)
        } else if overfit > 0 {
            train.shuffle = false;
            (overfit, overfit)
        } else {
            (o.limit_train_batches.of(train.num_batches()), 0)
        };
        let n_val = match val {
            None => 0,
            Some(v) if fast > 0 => Limit::Batches(fast).of(v.num_batches()),
            Some(v) if overfit > 0 => n_val.min(v.num_batches()),
            Some(v) => o.limit_val_batches.of(v.num_batches()),
        };
        let val_every = match o.val_check_interval {
            Limit::Fraction(f) => ((n_train as f64 * f).floor() as usize).max(1),
            Limit::Batches(b) => usize::try_from(b).unwrap_or(usize::MAX),
        };
        if o.check_val_every_n_epoch.is_some() && n_val > 0 && val_every > n_train {
            anyhow::bail!(
                "invalid --trainer.val_check_interval value `{val_every}`: it must be at most the {n_train} training batches of an epoch, or set check_val_every_n_epoch=null to count batches across epochs"
            );
        }
        let max_steps = if fast > 0 { Some(fast) } else { o.max_steps };
        let accumulate = o.accumulate_grad_batches;
        run.state.num_training_batches = n_train;

        if self.mixed.is_some() {
            model = dtype::master(model);
        }
        let Optimizers {
            mut optimizer,
            mut scheduler,
            interval,
        } = model.configure_optimizers();
        let mut lr = match interval {
            SchedulerInterval::Epoch => scheduler.step(),
            SchedulerInterval::Step => f64::NAN,
        };
        let (mut epoch, mut skip) = (0, 0);
        if let Some(path) = resume_from {
            if let Some(low) = self.mixed {
                // burn 0.21 rebuilds optimizer state in the device's default float type, which
                // a mixed precision sets to the low one: the f32 masters' Adam moments would come
                // back as {low:?} and the first step would fail.
                anyhow::bail!(
                    "cannot resume fit from {} under a mixed precision yet: burn 0.21 restores the optimizer's state in the device's float type ({low:?}), not in the f32 of the master weights; resume with a true precision, or load the weights only (validate/test/predict)",
                    path.display()
                );
            }
            let checkpoint = Checkpoint::decode(&self.checkpoint_io.load(&path)?, &path)?;
            model = checkpoint.load_model::<B, M>(model, &path)?;
            if self.mixed.is_some() {
                model = dtype::master(model);
            }
            optimizer = optimizer.load_record(checkpoint.record::<B, _>(
                "optimizer",
                &self.device,
                &path,
            )?);
            scheduler = scheduler.load_record::<B>(checkpoint.record::<B, _>(
                "scheduler",
                &self.device,
                &path,
            )?);
            if let (Some(state), Some(scaler)) = (checkpoint.grad_scaler(&path)?, &mut self.scaler)
            {
                *scaler = state;
            }
            if let Some(bytes) = checkpoint.sections.get("callbacks") {
                let states: callbacks::CallbackStates = serde_json::from_slice(bytes)
                    .with_context(|| format!("{}: corrupt callbacks section", path.display()))?;
                for c in &mut run.callbacks {
                    if let Some(state) = states.get(&c.state_key()) {
                        c.load_state(state).with_context(|| {
                            format!("restoring callback {} from {}", c.name(), path.display())
                        })?;
                    }
                }
            }
            let h = &checkpoint.header;
            if self.options.seed.is_none() {
                // The epochs' shuffles follow from the seed: continue with the run's own.
                self.seed = h.seed;
                run.seed = h.seed;
                B::seed(&self.device, h.seed);
            }
            run.state.global_step = h.global_step;
            run.state.learning_rate = h.learning_rate;
            if interval == SchedulerInterval::Epoch {
                lr = h.learning_rate;
            }
            (epoch, skip) = match usize::try_from(h.batches_done)? {
                done if done >= n_train => (h.epoch + 1, 0),
                done => (h.epoch, done),
            };
            tracing::info!(
                target: "ember",
                "resuming from {} at epoch {epoch}, batch {skip}, step {}",
                path.display(),
                h.global_step
            );
        }
        if let Some(ddp) = &self.ddp {
            model = ddp.broadcast_module(model)?;
        }
        // Calls a hook with a checkpoint saver over the current model, optimizer and scheduler.
        macro_rules! fit_hook {
            ($hook:ident) => {
                run.hook_fit(
                    &FitParts::<B, M, _, _>::new(
                        &model,
                        &optimizer,
                        &scheduler,
                        self.scaler.as_ref(),
                    ),
                    |c, x| c.$hook(x),
                )
            };
        }
        let signals = StopSignals::install()?;
        let mut interrupted = None;
        let mut accumulator = GradientsAccumulator::<M>::new();
        let mut collector = MetricCollector::default();
        let mut batches_seen: u64 = epoch * n_train as u64 + skip as u64;

        fit_hook!(on_fit_start)?;
        let sanity = match (val, o.num_sanity_val_steps) {
            _ if fast > 0 => 0,
            (Some(_), Some(s)) => usize::try_from(s).unwrap_or(usize::MAX).min(n_val),
            (Some(_), None) => n_val,
            (None, _) => 0,
        };
        if let Some(val) = val.filter(|_| sanity > 0) {
            run.state.sanity_checking = true;
            run.state.num_eval_batches = sanity;
            run.hook(None, |c, x| c.on_validation_start(x))?;
            self.eval_pass(
                run,
                &self.eval_model(&model),
                val,
                batcher,
                sanity,
                Stage::Validate,
            )?;
            run.hook(None, |c, x| c.on_validation_end(x))?;
            run.state.sanity_checking = false;
        }

        let mut stop = false;
        while epoch < run.state.max_epochs && !stop {
            run.state.epoch = epoch;
            run.state.batches_done = skip;
            fit_hook!(on_train_epoch_start)?;
            let batches = train.batch_indices(self.seed, epoch);
            let resumed_at = std::mem::take(&mut skip);
            for (batch_idx, indices) in batches.iter().take(n_train).enumerate().skip(resumed_at) {
                let batch = train.batch::<B, _>(batcher, indices, &self.device)?;
                let mut log = StepLog::new(Stage::Fit);
                let loss = match self.mixed {
                    Some(low) => dtype::compute(model.clone(), low).training_step(batch, &mut log),
                    None => model.training_step(batch, &mut log),
                };
                let loss = match &self.scaler {
                    Some(scaler) => loss.cast(FloatDType::F32).mul_scalar(scaler.scale),
                    None => loss,
                };
                let loss = if accumulate > 1 {
                    loss.div_scalar(accumulate as f64)
                } else {
                    loss
                };
                let mut grads = GradientsParams::from_grads(loss.backward(), &model);
                let steps_now =
                    (batch_idx + 1) % accumulate as usize == 0 || batch_idx + 1 == n_train;
                if accumulate > 1 {
                    accumulator.accumulate(&model, grads);
                    grads = if steps_now {
                        accumulator.grads()
                    } else {
                        GradientsParams::new()
                    };
                }
                if steps_now {
                    if let Some(ddp) = &self.ddp {
                        ddp.average_gradients::<B, M>(&model, &mut grads)?;
                    }
                    let finite = match &mut self.scaler {
                        Some(scaler) => {
                            let finite = scaler.unscale::<B, M>(&model, &mut grads);
                            let finite = scaler.update(finite);
                            log.log("loss_scale", scaler.scale);
                            log.log("skipped_steps", scaler.skipped_steps as f64);
                            finite
                        }
                        None => true,
                    };
                    if interval == SchedulerInterval::Step {
                        lr = scheduler.step();
                    }
                    if finite {
                        if let Some(threshold) = o.gradient_clip_val {
                            grads::clip(&model, &mut grads, o.gradient_clip_algorithm, threshold);
                        }
                        model = optimizer.step(lr, model, grads);
                    } else {
                        tracing::info!(
                            target: "ember",
                            step = run.state.global_step,
                            "non-finite gradients: optimizer step skipped, loss scale halved"
                        );
                    }
                    run.state.global_step += 1;
                    run.state.learning_rate = lr;
                    run.checkpoint_io.check()?;
                }
                let logging_step = steps_now
                    && run
                        .state
                        .global_step
                        .is_multiple_of(o.log_every_n_steps.max(1));
                collector.collect(&mut log, logging_step);
                run.state
                    .progress_bar_metrics
                    .append(&mut collector.prog_bar);
                if logging_step && !collector.step.is_empty() {
                    let mut metrics = collector.take_step(self.ranks())?;
                    run.state.callback_metrics.extend(metrics.clone());
                    metrics.insert("epoch".into(), epoch as f64);
                    run.loggers.log_metrics(&metrics, run.state.global_step)?;
                }
                run.state.batch_idx = batch_idx;
                run.state.batches_done = batch_idx + 1;
                batches_seen += 1;
                fit_hook!(on_train_batch_end)?;

                let validate_now = n_val > 0
                    && match o.check_val_every_n_epoch {
                        Some(n) => (epoch + 1) % n == 0 && (batch_idx + 1) % val_every == 0,
                        None => batches_seen.is_multiple_of(val_every as u64),
                    };
                if let Some(val) = val.filter(|_| validate_now) {
                    run.state.num_eval_batches = n_val;
                    run.hook(None, |c, x| c.on_validation_start(x))?;
                    let eval = self.eval_model(&model);
                    let metrics =
                        self.eval_pass(run, &eval, val, batcher, n_val, Stage::Validate)?;
                    run.publish(&metrics, true)?;
                    fit_hook!(on_validation_end)?;
                }
                let (signal, should_stop) =
                    self.agree_on_stop(signals.received(), run.state.should_stop)?;
                run.state.should_stop = should_stop;
                if let Some(signal) = signal {
                    let dir = run
                        .state
                        .log_dir
                        .clone()
                        .unwrap_or_else(|| o.default_root_dir.clone());
                    let path = dir.join("checkpoints").join(format!(
                        "{}-epoch={epoch}-step={}.ckpt",
                        signal.to_ascii_lowercase(),
                        run.state.global_step
                    ));
                    if self.is_global_zero {
                        let parts = FitParts::<B, M, _, _>::new(
                            &model,
                            &optimizer,
                            &scheduler,
                            self.scaler.as_ref(),
                        );
                        let states = callbacks::states_of(&run.callbacks);
                        let io = run.checkpoint_io.as_ref();
                        parts.save(io, (run.seed, &run.hparams), &path, &run.state, &states)?;
                        run.checkpoint_io.wait()?;
                        eprintln!(
                            "received {signal}: stopped after step {}, checkpoint saved to {}; resume with --trainer.ckpt_path={}",
                            run.state.global_step,
                            path.display(),
                            path.display()
                        );
                    }
                    interrupted = Some(path);
                    break;
                }
                let steps_done = max_steps.is_some_and(|m| run.state.global_step >= m);
                stop = steps_done || (run.state.should_stop && epoch + 1 >= o.min_epochs);
                if stop {
                    break;
                }
            }
            let epoch_metrics = collector.take_epoch(self.ranks())?;
            run.publish(&epoch_metrics, false)?;
            if interval == SchedulerInterval::Epoch {
                lr = scheduler.step();
            }
            fit_hook!(on_train_epoch_end)?;
            run.state.should_stop = self.agree_on_stop(None, run.state.should_stop)?.1;
            run.loggers.save()?;
            stop = stop
                || interrupted.is_some()
                || max_steps.is_some_and(|m| run.state.global_step >= m)
                || (run.state.should_stop && epoch + 1 >= o.min_epochs);
            epoch += 1;
        }
        if let Some(ddp) = &self.ddp {
            ddp.check_replicas(&model)?;
        }
        fit_hook!(on_fit_end)?;
        let best_model_path = run.callbacks.iter().find_map(|c| c.best_model_path());
        Ok(FitOutcome {
            model,
            global_step: run.state.global_step,
            epochs: epoch,
            seconds: started.elapsed().as_secs_f64(),
            metrics: run.state.callback_metrics.clone(),
            best_model_path,
            log_dir: run.state.log_dir.clone(),
            stopped_early: run.state.should_stop,
            interrupted,
        })
    }
}

/// What a `fit` checkpoint holds besides the loop's state: the model, the optimizer, the
/// scheduler and the loss scaler as they are now.
struct FitParts<'a, B, M, O, S> {
    model: &'a M,
    optimizer: &'a O,
    scheduler: &'a S,
    scaler: Option<&'a GradScaler>,
    backend: std::marker::PhantomData<B>,
}

impl<'a, B, M, O, S> FitParts<'a, B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
    S: LrScheduler,
{
    fn new(
        model: &'a M,
        optimizer: &'a O,
        scheduler: &'a S,
        scaler: Option<&'a GradScaler>,
    ) -> Self {
        Self {
            model,
            optimizer,
            scheduler,
            scaler,
            backend: std::marker::PhantomData,
        }
    }

    /// Writes a checkpoint: weights, optimizer, scheduler, loss scaler, progress, seed,
    /// callback states and hyperparameters.
    fn save(
        &self,
        io: &dyn CheckpointIO,
        (seed, hparams): (u64, &Value),
        path: &Path,
        state: &TrainerState,
        callback_states: &callbacks::CallbackStates,
    ) -> anyhow::Result<()> {
        let progress = Progress {
            epoch: state.epoch,
            global_step: state.global_step,
            batches_done: state.batches_done as u64,
            learning_rate: state.learning_rate,
            seed,
        };
        let mut sections = vec![
            (
                "optimizer".to_owned(),
                record_bytes::<B, _>(self.optimizer.to_record())?,
            ),
            (
                "scheduler".to_owned(),
                record_bytes::<B, _>(self.scheduler.to_record::<B>())?,
            ),
            ("callbacks".to_owned(), serde_json::to_vec(callback_states)?),
        ];
        if let Some(scaler) = self.scaler {
            sections.push(("grad_scaler".to_owned(), scaler_bytes(scaler)));
        }
        if !hparams.is_null() {
            sections.push(("hparams".to_owned(), serde_json::to_vec(hparams)?));
        }
        let bytes = Checkpoint::encode(
            progress,
            state.callback_metrics.clone(),
            weights_of::<B, M>(self.model)?,
            sections,
        )?;
        io.save(&bytes, path)
    }
}

/// The loss scaler's checkpoint section.
fn scaler_bytes(scaler: &GradScaler) -> Vec<u8> {
    serde_json::to_vec(scaler).expect("a GradScaler is plain numbers")
}

/// The parts of the Trainer one entry point works with.
struct Run {
    state: TrainerState,
    loggers: Loggers,
    callbacks: Vec<Box<dyn Callback>>,
    device_stats: Box<dyn Fn() -> DeviceStats>,
    checkpoint_io: Arc<dyn CheckpointIO>,
    /// The run's seed and hyperparameters, for checkpoints.
    seed: u64,
    hparams: Rc<Value>,
}

impl Run {
    fn context<'a>(
        &'a mut self,
        saver: Option<Saver<'a>>,
        others: [&'a [Box<dyn Callback>]; 2],
    ) -> CallbackContext<'a> {
        CallbackContext {
            state: &mut self.state,
            loggers: &mut self.loggers,
            saver,
            others,
            own_state: None,
            io: self.checkpoint_io.as_ref(),
            device_stats: self.device_stats.as_ref(),
        }
    }

    /// Calls one hook on every callback, in order; the first error stops and names the callback.
    fn hook(
        &mut self,
        saver: Option<Saver<'_>>,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut callbacks = std::mem::take(&mut self.callbacks);
        let result = (|| {
            for i in 0..callbacks.len() {
                // The others stay readable: a checkpoint saved from this hook records their states.
                let (before, rest) = callbacks.split_at_mut(i);
                let (c, after) = rest.split_first_mut().expect("i is below the length");
                let mut ctx = self.context(saver, [&*before, &*after]);
                f(c.as_mut(), &mut ctx).with_context(|| format!("in callback {}", c.name()))?;
            }
            Ok(())
        })();
        self.callbacks = callbacks;
        result
    }

    /// A hook during `fit`, where callbacks may save checkpoints of the model and optimizer.
    fn hook_fit<B, M, O, S>(
        &mut self,
        parts: &FitParts<'_, B, M, O, S>,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
        S: LrScheduler,
    {
        let (io, seed, hparams) = (
            Arc::clone(&self.checkpoint_io),
            self.seed,
            Rc::clone(&self.hparams),
        );
        let save = |path: &Path, state: &TrainerState, states: &callbacks::CallbackStates| {
            parts.save(io.as_ref(), (seed, &hparams), path, state, states)
        };
        self.hook(Some(&save), f)
    }

    /// Makes epoch-level metrics visible: to callbacks, the progress bar, and the loggers
    /// (with the epoch number, at the current step).
    fn publish(
        &mut self,
        metrics: &BTreeMap<String, f64>,
        to_prog_bar: bool,
    ) -> anyhow::Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        self.state.callback_metrics.extend(metrics.clone());
        if to_prog_bar {
            self.state.progress_bar_metrics.extend(metrics.clone());
        }
        let mut logged = metrics.clone();
        logged.insert("epoch".into(), self.state.epoch as f64);
        self.loggers.log_metrics(&logged, self.state.global_step)
    }
}
