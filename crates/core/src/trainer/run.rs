//! The state one entry point (fit, validate, test, predict) works with, its callback hooks,
//! and what a `fit` checkpoint is written from.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context;
use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor};
use serde_json::Value;

use crate::accelerator::DeviceStats;
use crate::callbacks::{self, Callback, CallbackContext, ModelView, Saver, TrainerState};
use crate::checkpoint_io::CheckpointIO;
use crate::loggers::Loggers;
use crate::optim::{self, ExactState};
use crate::plugins::precision::PrecisionPlugin;
use crate::plugins::weights::{ModelWeights, Weights};
use crate::stage::Stage;
use crate::trainer::Trainer;
use crate::trainer::checkpoint::{Checkpoint, ExtraTensors, Progress, record_bytes, weights_of};
use crate::trainer::loops::optimization::SlotSections;
use crate::trainer::loops::step::Slot;
use crate::trainer::profiler::{Profiler, Report};
use crate::trainer::state_gather::StateGather;

/// What a `fit` checkpoint holds besides the loop's state: the model, the optimizers, their
/// schedulers and the precision plugin's state as they are now. It lends the model's weights
/// to callbacks (which may change them between saves).
pub(super) struct FitParts<'a, B: AutodiffBackend, M, O, S> {
    model: &'a RefCell<&'a mut M>,
    /// The latest training batch's loss, as the step returned it.
    loss: Option<&'a Tensor<B, 1>>,
    slots: &'a [Slot<O, S>],
    precision: &'a dyn PrecisionPlugin,
    /// Where the optimizer's state is sharded: how rank 0 gathers it.
    gather: Option<&'a StateGather>,
    backend: std::marker::PhantomData<B>,
}

impl<'a, B, M, O, S> FitParts<'a, B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: ExactState<M, B>,
    S: LrScheduler,
{
    pub(super) fn new(
        (model, loss): (&'a RefCell<&'a mut M>, Option<&'a Tensor<B, 1>>),
        slots: &'a [Slot<O, S>],
        precision: &'a dyn PrecisionPlugin,
        gather: Option<&'a StateGather>,
    ) -> Self {
        Self {
            model,
            loss,
            slots,
            precision,
            gather,
            backend: std::marker::PhantomData,
        }
    }

    /// Ends a hook (or a save on a stop signal) where the state is sharded: see
    /// [`StateGather::serve`].
    pub(super) fn serve_state(&self) -> anyhow::Result<()> {
        let Some(gather) = self.gather else {
            return Ok(());
        };
        gather.serve(|| {
            // Optimizer 0's: a strategy that shards the state runs one optimizer.
            let dtypes = param_dtypes(&weights_of::<B, M>(&**self.model.borrow())?);
            self.slots[0]
                .optimizer
                .state(&dtypes)
                .unwrap_or_else(unreadable)
        })
    }

    /// Writes a checkpoint: weights, optimizer, scheduler, the precision plugin's state,
    /// progress, seed, hyperparameters, and what `callbacks` put in (with `own_state`, the
    /// state of a saving callback not among them).
    pub(super) fn save(
        &self,
        io: &dyn CheckpointIO,
        (seed, hparams): (u64, &Value),
        path: &Path,
        state: &TrainerState,
        (callbacks, own_state): (&[&dyn Callback], Option<(String, Value)>),
    ) -> anyhow::Result<()> {
        let progress = Progress {
            epoch: state.epoch,
            global_step: state.global_step,
            batches_done: state.batches_done as u64,
            epoch_done: state.batches_done >= state.num_training_batches,
            world_size: state.world_size as u64,
            learning_rate: state.learning_rate,
            seed,
        };
        let mut weights = weights_of::<B, M>(&**self.model.borrow())?;
        let dtypes = param_dtypes(&weights);
        let (callback_states, callback_tensors) =
            callbacks::checkpoint_parts(callbacks, own_state, &mut weights)?;
        let mut sections = Vec::new();
        let mut state_tensors = Vec::new();
        for (index, slot) in self.slots.iter().enumerate() {
            let names = SlotSections::of(index);
            // The optimizer's state as tensors in their own dtypes where ember reads it
            // (gathered from every rank where it is sharded); burn's record (floats in the
            // device's type on load) for other optimizers.
            let own = slot.optimizer.state(&dtypes);
            let optimizer_state = match (own, self.gather) {
                (Some(state), Some(gather)) => Some(gather.request(state?)),
                (None, Some(_)) => Some(unreadable()),
                (state, None) => state,
            };
            match optimizer_state {
                Some(optimizer_state) => {
                    let (description, tensors) = optim::split(optimizer_state?)?;
                    sections.push((names.state, description));
                    let named = tensors
                        .into_iter()
                        .map(|(n, t)| (format!("{}{n}", names.prefix), t));
                    state_tensors.extend(named);
                }
                None => {
                    let record = record_bytes::<B, _>(slot.optimizer.to_record())?;
                    sections.push((names.record, record));
                }
            }
            let scheduler = record_bytes::<B, _>(slot.scheduler.to_record::<B>())?;
            sections.push((names.scheduler, scheduler));
        }
        if self.slots.len() > 1 {
            let rates: Vec<f64> = self.slots.iter().map(|s| s.lr).collect();
            sections.push((SlotSections::RATES.to_owned(), serde_json::to_vec(&rates)?));
        }
        sections.push((
            "callbacks".to_owned(),
            serde_json::to_vec(&callback_states)?,
        ));
        if let Some(precision_state) = self.precision.state() {
            let bytes = serde_json::to_vec(&precision_state)?;
            sections.push((self.precision.state_key(), bytes));
        }
        if !hparams.is_null() {
            sections.push(("hparams".to_owned(), serde_json::to_vec(hparams)?));
        }
        // Copies of the weights and serialised records are taken here; checksumming and
        // assembling the file may happen on the checkpoint IO's thread.
        let metrics = state.callback_metrics.clone();
        let extra = ExtraTensors {
            optimizer_state: state_tensors,
            callbacks: callback_tensors,
        };
        let encode =
            move || Checkpoint::encode_with_state(progress, metrics, weights, extra, sections);
        io.save_encoded(Box::new(encode), path)
    }
}

impl<B, M, O, S> ModelView for FitParts<'_, B, M, O, S>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    fn with(&self, f: &mut dyn FnMut(&mut dyn Weights)) {
        let mut model = self.model.borrow_mut();
        f(&mut ModelWeights::<B, M>::new(&mut **model));
    }

    fn loss(&self) -> Option<f64> {
        let loss = self.loss?.clone().cast(burn::tensor::FloatDType::F32);
        Some(f64::from(loss.into_scalar().elem::<f32>()))
    }
}

/// Each weight's dtype by parameter id: the dtypes an optimizer's state is kept in.
fn param_dtypes(
    weights: &[(String, burn::module::ParamId, burn::tensor::TensorData)],
) -> HashMap<burn::module::ParamId, burn::tensor::DType> {
    weights.iter().map(|(_, id, d)| (*id, d.dtype)).collect()
}

/// The error for an optimizer whose state ember cannot read, under a sharded strategy.
fn unreadable() -> anyhow::Result<optim::OptimizerState> {
    anyhow::bail!(
        "the strategy shards the optimizer's state, which ember reads for Adam, AdamW and SGD only: use one of those, or ddp"
    )
}

/// What callbacks may reach in a hook during `fit`: a checkpoint saver and the model's weights.
type FitAccess<'a> = (Option<Saver<'a>>, Option<&'a dyn ModelView>);

/// The parts of the Trainer one entry point works with.
pub(super) struct Run {
    pub(super) state: TrainerState,
    pub(super) loggers: Loggers,
    pub(super) callbacks: Vec<Box<dyn Callback>>,
    pub(super) device_stats: Box<dyn Fn() -> DeviceStats>,
    pub(super) checkpoint_io: Arc<dyn CheckpointIO>,
    /// The run's seed and hyperparameters, for checkpoints.
    pub(super) seed: u64,
    pub(super) hparams: Rc<Value>,
    /// The Trainer's profiler, recording this entry point.
    pub(super) profiler: Profiler,
    /// The callbacks saw this run's failure already (`fit` shows it to them while it still
    /// holds the model, so that they may save it).
    pub(super) failure_reported: bool,
}

impl Run {
    /// What an optimizer step changes and checks: the loop's counters and the checkpoint IO.
    pub(super) fn step_parts(&mut self) -> (&mut TrainerState, &dyn CheckpointIO) {
        (&mut self.state, self.checkpoint_io.as_ref())
    }

    fn context<'a>(
        &'a mut self,
        (saver, model): FitAccess<'a>,
        others: [&'a [Box<dyn Callback>]; 2],
    ) -> CallbackContext<'a> {
        CallbackContext {
            state: &mut self.state,
            loggers: &mut self.loggers,
            saver,
            model,
            others,
            own_state: None,
            io: self.checkpoint_io.as_ref(),
            device_stats: self.device_stats.as_ref(),
            logged: Vec::new(),
        }
    }

    /// Calls one hook on every callback, in order; the first error stops and names the callback.
    pub(super) fn hook(
        &mut self,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.hook_with((None, None), f)
    }

    /// [`hook`](Self::hook), with what callbacks may reach during `fit`.
    fn hook_with(
        &mut self,
        access: FitAccess<'_>,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let _span = self.profiler.span("callbacks");
        let mut callbacks = std::mem::take(&mut self.callbacks);
        let mut logged = Vec::new();
        let result = (|| -> anyhow::Result<()> {
            for i in 0..callbacks.len() {
                // The others stay readable: a checkpoint saved from this hook records their states.
                let (before, rest) = callbacks.split_at_mut(i);
                let (c, after) = rest.split_first_mut().expect("i is below the length");
                let mut ctx = self.context(access, [&*before, &*after]);
                let called = f(c.as_mut(), &mut ctx);
                logged.append(&mut ctx.logged);
                called.with_context(|| format!("in callback {}", c.name()))?;
            }
            Ok(())
        })();
        self.callbacks = callbacks;
        result?;
        self.publish_logged(logged)
    }

    /// Publishes what callbacks logged in a hook ([`CallbackContext::log`]).
    fn publish_logged(&mut self, logged: Vec<(String, f64, bool)>) -> anyhow::Result<()> {
        let (mut metrics, mut prog_bar) = (BTreeMap::new(), BTreeMap::new());
        for (name, value, shown) in logged {
            if shown {
                prog_bar.insert(name.clone(), value);
            }
            metrics.insert(name, value);
        }
        self.state.progress_bar_metrics.extend(&prog_bar);
        self.publish(&metrics, false)
    }

    /// A hook during `fit`, where callbacks reach the model's weights and, where `saves`, may
    /// save checkpoints of the model and optimizer.
    pub(super) fn hook_fit<B, M, O, S>(
        &mut self,
        parts: &FitParts<'_, B, M, O, S>,
        saves: bool,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: ExactState<M, B>,
        S: LrScheduler,
    {
        let (io, seed, hparams) = (
            Arc::clone(&self.checkpoint_io),
            self.seed,
            Rc::clone(&self.hparams),
        );
        let profiler = self.profiler.clone();
        let save = |path: &Path, state: &TrainerState, callbacks: &[&dyn Callback], own| {
            let _span = profiler.span("checkpoint");
            parts.save(io.as_ref(), (seed, &hparams), path, state, (callbacks, own))
        };
        match saves {
            true => self.hook_with((Some(&save), Some(parts)), f)?,
            false => self.hook_with((None, Some(parts)), f)?,
        }
        parts.serve_state()
    }

    /// Makes epoch-level metrics visible: to callbacks, the progress bar, and the loggers
    /// (with the epoch number, at the current step).
    pub(super) fn publish(
        &mut self,
        metrics: &BTreeMap<String, f64>,
        to_prog_bar: bool,
    ) -> anyhow::Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        self.state.callback_metrics.extend(metrics.clone());
        if to_prog_bar {
            self.state.progress_bar_metrics.extend(metrics);
        }
        let mut logged = metrics.clone();
        logged.insert("epoch".into(), self.state.epoch as f64);
        let _span = self.profiler.span("loggers");
        self.loggers.log_metrics(&logged, self.state.log_step())
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// Creates the loggers on first use and the state of one entry point; makes this thread
    /// one of a CPU pool's (see [`host_pool`](crate::host_pool)) and sets the host's subnormal
    /// mode on that pool (see [`host_float`](crate::host_float)); runs `setup`.
    pub(super) fn start(&mut self, stage: Stage) -> anyhow::Result<Run> {
        let flush = self.strategy.parts().plan.flush_denormal;
        crate::host_pool::join_compute_pool();
        crate::host_float::set_flush_denormal_everywhere(flush);
        self.ensure_loggers()?;
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
            is_global_zero: self.is_global_zero(),
            global_rank: self.collective().rank(),
            world_size: self.collective().world_size(),
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
            checkpoint_io: Arc::clone(self.checkpoint_io()),
            seed: self.seed,
            hparams: Rc::new(self.hparams.clone()),
            profiler: {
                self.profiler.start();
                self.profiler.clone()
            },
            failure_reported: false,
        };
        run.hook(|c, x| c.setup(x))?;
        Ok(run)
    }

    /// Creates the loggers on first use (rank 0; none on the others and in a fast dev run),
    /// logging the hyperparameters.
    pub(super) fn ensure_loggers(&mut self) -> anyhow::Result<()> {
        if self.loggers.is_none() {
            let mut loggers = if self.is_global_zero() && self.options.fast_dev_run == 0 {
                crate::registered::build::loggers(
                    &self.options.default_root_dir,
                    &self.options.logger,
                    &self.plugins,
                )?
            } else {
                Loggers::none()
            };
            if self.is_global_zero() {
                for logger in self.extra_loggers.drain(..) {
                    loggers.push(logger);
                }
                if !self.hparams.is_null() {
                    loggers.log_hyperparams(&self.hparams)?;
                }
            }
            self.loggers = Some(loggers);
        }
        Ok(())
    }

    /// Runs `on_exception` on failure, then `teardown`, and gives the run's parts back.
    pub(super) fn finish<T>(
        &mut self,
        mut run: Run,
        result: anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        if let Err(e) = &result
            && !run.failure_reported
        {
            let _ = run.hook(|c, x| {
                c.on_exception(x, e);
                Ok(())
            });
        }
        let teardown = run.hook(|c, x| c.teardown(x));
        let written = run.checkpoint_io.wait();
        let saved = run.loggers.save();
        if run.state.stage == Some(Stage::Fit) && self.is_global_zero() {
            self.write_curves(run.loggers.log_dir());
        }
        let finalized = run.loggers.finalize(result.is_ok());
        // A failed entry point reports nothing: its ranks may not all be here to agree where.
        let profiled = match &result {
            Ok(_) => self.report_profile(&run.state),
            Err(_) => Ok(()),
        };
        self.callbacks = run.callbacks;
        self.loggers = Some(run.loggers);
        let value = result?;
        teardown?;
        written?;
        saved?;
        finalized?;
        profiled?;
        Ok(value)
    }

    /// Ends the entry point's profile: rank 0 prints `simple`'s table, or where the ranks
    /// wrote `advanced`'s traces (in rank 0's log directory, else the root directory).
    fn report_profile(&mut self, state: &TrainerState) -> anyhow::Result<()> {
        let stage = state.stage.map_or("run", |s| s.name());
        let mut dir = (state.log_dir.clone()).unwrap_or_else(|| state.default_root_dir.clone());
        if self.profiler.writes_traces() && self.collective().world_size() > 1 {
            // Only rank 0 has a log directory: every rank's trace goes there.
            let mut bytes = dir.to_string_lossy().into_owned().into_bytes();
            self.collective().broadcast(&mut bytes, 0)?;
            dir = String::from_utf8(bytes)?.into();
        }
        let report = self.profiler.finish(stage, self.shard().rank, &dir)?;
        if self.is_global_zero() {
            match report {
                Report::None => {}
                Report::Table(table) => eprint!("{table}"),
                Report::Trace(path) => eprintln!("profiler trace written to {}", path.display()),
            }
        }
        Ok(())
    }
}
