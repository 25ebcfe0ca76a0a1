//! The fit loop (Lightning's `_FitLoop`): restores a checkpoint, runs the sanity check, then
//! epochs of the training epoch loop until a limit or a stop, and tears the strategy down.
//! Its state lives in [`FitLoop`]; one epoch is in `training_epoch.rs`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::AutodiffBackend;

use super::evaluation::EvaluationLoop;
use super::optimization::Optimization;
use super::reload::{self, FitLoaders};
use super::schedule::FitSchedule;
use crate::callbacks::{Callback, CallbackContext, Freeze};
use crate::optim::ExactState;
use crate::plugins::dtype;
use crate::plugins::strategy::Strategy;
use crate::plugins::weights::{ModelWeights, Weights};
use crate::stage::Stage;
use crate::trainer::checkpoint::Checkpoint;
use crate::trainer::collector::MetricCollector;
use crate::trainer::data::Loader;
use crate::trainer::freezing;
use crate::trainer::hparams::Hparams;
use crate::trainer::module::{BatcherFor, EvalBatch, MissingStep, TrainingModule};
use crate::trainer::run::{FitParts, Run};
use crate::trainer::signals::{self, StopSignals};
use crate::trainer::state_gather::StateGather;
use crate::trainer::{FitOutcome, Inner, Trainer};

/// Where the fit loop is: the epoch, and the batches of it already done (when resuming).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Position {
    pub(super) epoch: u64,
    pub(super) skip: usize,
}

/// One `fit` in progress.
pub(in crate::trainer) struct FitLoop<'t, B: AutodiffBackend, M: TrainingModule<B>> {
    pub(super) trainer: &'t mut Trainer<B>,
    pub(super) run: &'t mut Run,
    pub(super) schedule: FitSchedule,
    pub(super) position: Position,
    pub(super) opt: Optimization<B, M>,
    /// Step and epoch metrics logged by `training_step`, until written.
    pub(super) collector: MetricCollector,
    /// The checkpoint written when a stop signal ended the run.
    pub(super) interrupted: Option<PathBuf>,
    pub(super) signals: StopSignals,
    /// The model has no `validation_step`: the val loader is skipped.
    pub(super) no_validation_step: bool,
    /// Where the strategy shards the optimizer's state: how checkpoints gather it.
    pub(super) gather: Option<StateGather>,
    /// The modules frozen on callbacks' request ([`TrainerState::frozen_modules`] as last
    /// applied).
    ///
    /// [`TrainerState::frozen_modules`]: crate::callbacks::TrainerState::frozen_modules
    frozen: BTreeMap<String, (Freeze, freezing::Frozen)>,
    /// The latest training batch's loss (detached), for callbacks
    /// ([`CallbackContext::loss`](crate::callbacks::CallbackContext::loss)).
    pub(super) last_loss: Option<burn::tensor::Tensor<B, 1>>,
}

impl<'t, B, M> FitLoop<'t, B, M>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    /// A fit of `model` as `schedule` says: the model in its master type, its optimizers
    /// configured, continuing from the checkpoint `resume_from` (read from its path) if one is
    /// given.
    pub(in crate::trainer) fn new(
        trainer: &'t mut Trainer<B>,
        run: &'t mut Run,
        schedule: FitSchedule,
        mut model: M,
        resume_from: Option<(PathBuf, Checkpoint)>,
    ) -> anyhow::Result<Self> {
        run.state.num_training_batches = schedule.train_batches;
        if trainer.precision().casts_for_compute() {
            model = dtype::master(model);
        }
        let optimizers = model
            .configure_optimizers(&Hparams::new(&trainer.hparams))
            .context("configure_optimizers")?;
        let mut opt = Optimization::new(model, optimizers)?;
        let mut position = Position::default();
        if let Some((path, checkpoint)) = resume_from {
            (opt, position) = Self::restore(trainer, run, &schedule, opt, checkpoint, &path)?;
        }
        Ok(Self {
            trainer,
            run,
            schedule,
            position,
            opt,
            collector: MetricCollector::default(),
            interrupted: None,
            signals: StopSignals::install()?,
            no_validation_step: false,
            gather: None,
            frozen: BTreeMap::new(),
            last_loss: None,
        })
    }

    /// Calls a hook with the model's weights and a checkpoint saver over the current model,
    /// optimizer and scheduler.
    pub(super) fn fit_hook(
        &mut self,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.hook_with(true, f)
    }

    /// Calls a hook with the model's weights, and a checkpoint saver where `saves`.
    fn hook_with(
        &mut self,
        saves: bool,
        f: impl Fn(&mut dyn Callback, &mut CallbackContext<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let precision = self.trainer.precision();
        let model = RefCell::new(&mut self.opt.model);
        let view = (&model, self.last_loss.as_ref());
        let parts = FitParts::new(view, &self.opt.slots, precision, self.gather.as_ref());
        self.run.hook_fit(&parts, saves, f)
    }

    /// Runs the fit to its end and returns what it trained.
    pub(in crate::trainer) fn run<I, Bt>(
        mut self,
        batcher: &Bt,
        mut loaders: FitLoaders<'_, I>,
    ) -> anyhow::Result<FitOutcome<M>>
    where
        Bt: BatcherFor<B, I, M>,
        I: Send + 'static,
    {
        let started = Instant::now();
        let first_step = self.run.state.global_step;
        self.took_loaders(&mut loaders.train);
        let mut weights = ModelWeights::<B, M>::new(&mut self.opt.model);
        self.trainer.strategy.setup_weights(&mut weights)?;
        let sharding = self.trainer.strategy.optimizer_sharding();
        if sharding.and_then(|s| s.owned(&weights)).is_some() {
            let order = weights.trainable().into_iter().map(|p| p.id).collect();
            let collective = Rc::clone(&self.trainer.strategy.parts().collective);
            self.gather = Some(StateGather::new(collective, order));
        }
        tried!(self, self.fit_hook(|c, x| c.on_fit_start(x)));
        tried!(self, self.apply_finetuning());
        if self.schedule.sanity_batches.iter().any(|&b| b > 0) {
            self.run.state.sanity_checking = true;
            let batches = self.schedule.sanity_batches.clone();
            tried!(self, self.validate(&loaders.val, batcher, batches, false));
            self.run.state.sanity_checking = false;
        }
        let nothing = self.schedule.nothing_to_train(self.run.state.global_step);
        if let Some(why) = nothing.as_ref().filter(|_| self.trainer.is_global_zero()) {
            eprintln!("{why}");
        }
        // A callback may stop the fit before it trains (a Timer whose budget a resumed fit
        // has spent already).
        let should_stop = tried!(self, self.agree_on_stop(None, self.run.state.should_stop)).1;
        self.run.state.should_stop = should_stop;
        let state = &self.run.state;
        let stopped = (self.schedule).stops(state.global_step, should_stop, self.position.epoch);
        let mut stop = nothing.is_some() || stopped;
        while self.position.epoch < self.run.state.max_epochs && !stop {
            // Every rank makes its loaders again, or none goes on.
            let reloaded = match loaders.reloads() {
                true => self.trainer.agree(loaders.reload(self.position.epoch)),
                false => Ok(false),
            };
            if tried!(self, reloaded) {
                let schedule =
                    reload::schedule(&self.trainer.options, (&loaders.train, &loaders.val));
                self.schedule = tried!(self, schedule.map_err(anyhow::Error::from));
                self.took_loaders(&mut loaders.train);
            }
            let (next, ended) = self.run_epoch(&loaders.train, &loaders.val, batcher)?;
            self = next;
            stop = ended;
            self.position.epoch += 1;
        }
        let opt = &mut self.opt;
        let mut weights = ModelWeights::<B, M>::new(&mut opt.model);
        self.trainer.strategy.teardown(&mut weights)?;
        let optimizer = &opt.slots[0].optimizer;
        check_optimizer_state::<B, M>(&mut *self.trainer.strategy, &weights, optimizer)?;
        self.fit_hook(|c, x| c.on_fit_end(x))?;
        if std::mem::take(&mut self.run.state.recompute_batch_norm) {
            self.recompute_batch_norm(&loaders.train, batcher)?;
        }
        let run = &self.run;
        Ok(FitOutcome {
            model: self.opt.model,
            global_step: run.state.global_step,
            steps: run.state.global_step - first_step,
            epochs: self.position.epoch,
            seconds: started.elapsed().as_secs_f64(),
            metrics: run.state.callback_metrics.clone(),
            best_model_path: run.callbacks.iter().find_map(|c| c.best_model_path()),
            log_dir: run.state.log_dir.clone(),
            stopped_early: run.state.should_stop,
            interrupted: self.interrupted,
        })
    }

    /// Fits the loop to loaders just made: their batch count in the state, and the training
    /// loader in its own order when `overfit_batches` asks for that.
    fn took_loaders<I>(&mut self, train: &mut Loader<I>) {
        self.run.state.num_training_batches = self.schedule.train_batches;
        if self.schedule.unshuffled {
            train.shuffle = false;
        }
    }

    /// A validation pass of `batches` batches of each val loader on the model in its compute
    /// types. Within
    /// training (`publish`), its metrics are published and `on_validation_end` gets a
    /// checkpoint saver; the sanity check publishes nothing. A model without
    /// `validation_step` is warned about once and not validated again (Lightning skips the
    /// val loop then).
    pub(super) fn validate<I, Bt>(
        &mut self,
        val: &[Loader<I>],
        batcher: &Bt,
        batches: Vec<usize>,
        publish: bool,
    ) -> anyhow::Result<()>
    where
        Bt: Batcher<Inner<B>, I, EvalBatch<B, M>>,
        I: Send + 'static,
    {
        if self.no_validation_step {
            return Ok(());
        }
        let _span = self.trainer.profiler.span("validation");
        self.run.state.num_eval_batches = batches.first().copied().unwrap_or(0);
        self.run.state.dataloader_idx = 0;
        self.hook_with(false, |c, x| c.on_validation_start(x))?;
        let model = self.trainer.eval_model(&self.opt.model);
        let pass = EvaluationLoop {
            stage: Stage::Validate,
            batches,
        };
        let metrics = match pass.run(self.trainer, self.run, &model, (val, batcher)) {
            Err(e) if e.is::<MissingStep>() => {
                if self.trainer.is_global_zero() {
                    eprintln!("warning: {e}; the val loader is skipped");
                }
                self.no_validation_step = true;
                Default::default()
            }
            result => result?,
        };
        if publish {
            self.run.publish(&metrics, true)?;
            self.fit_hook(|c, x| c.on_validation_end(x))
        } else {
            self.hook_with(false, |c, x| c.on_validation_end(x))
        }
    }

    /// Freezes and unfreezes the modules callbacks asked for since the last hook. Refused
    /// under a strategy that shards the optimizer's state: it dealt out the trainable
    /// parameters when `fit` started.
    pub(super) fn apply_finetuning(&mut self) -> anyhow::Result<()> {
        let wanted = &self.run.state.frozen_modules;
        let applied = self.frozen.iter().map(|(path, (freeze, _))| (path, freeze));
        if wanted.iter().eq(applied) {
            return Ok(());
        }
        let strategy = self.trainer.strategy.name().to_owned();
        if self.trainer.strategy.optimizer_sharding().is_some() {
            let modules = crate::error::list(wanted.keys().chain(self.frozen.keys()));
            return Err(crate::error::FlagError::new(
                "--trainer.strategy",
                strategy.as_str(),
                format!(
                    "ddp or single_device to freeze or unfreeze modules during fit ({modules}): {strategy} deals out the trainable parameters when fit starts; use ddp"
                ),
            )
            .into());
        }
        let model = &mut self.opt.model;
        let changed = |path: &String| self.frozen.get(path).map(|(f, _)| f) != wanted.get(path);
        let thawed: Vec<String> = self.frozen.keys().filter(|p| changed(p)).cloned().collect();
        for path in thawed {
            if let Some((_, frozen)) = self.frozen.remove(&path) {
                *model = freezing::unfreeze(model.clone(), &frozen);
            }
        }
        for (path, freeze) in wanted {
            if !self.frozen.contains_key(path) {
                // The path came from a callback's settings (BackboneFinetuning's `backbone`).
                let frozen;
                (*model, frozen) =
                    freezing::freeze(model.clone(), path, freeze.train_bn).map_err(|e| {
                        crate::error::FlagError::new("--trainer.callbacks", path, format!("{e:#}"))
                    })?;
                self.frozen.insert(path.clone(), (*freeze, frozen));
            }
        }
        Ok(())
    }

    /// The stop signal and early-stop decision every rank acts on: each rank's own in a
    /// one-process run; with several, the strategy makes a stop anywhere stop all ranks at
    /// the same batch (a rank that stopped alone would leave the others waiting in their next
    /// all-reduce).
    pub(super) fn agree_on_stop(
        &self,
        signal: Option<&'static str>,
        should_stop: bool,
    ) -> anyhow::Result<(Option<&'static str>, bool)> {
        let code = signal.map_or(0, |s| {
            1 + signals::NAMES.iter().position(|n| *n == s).unwrap_or(0)
        });
        let mut flags = [code as f64, f64::from(u8::from(should_stop))];
        self.trainer.strategy.agree(&mut flags)?;
        let signal = (flags[0] > 0.0).then(|| signals::NAMES[flags[0] as usize - 1]);
        Ok((signal, flags[1] > 0.0))
    }
}

/// Reports (at info level) the optimizer state this process holds, and has the strategy
/// check it.
fn check_optimizer_state<B, M>(
    strategy: &mut dyn Strategy,
    weights: &dyn Weights,
    optimizer: &M::Optimizer,
) -> anyhow::Result<()>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    let sizes = weights.trainable().into_iter();
    let param_bytes = sizes.map(|p| (p.id, p.bytes() as u64)).collect();
    let Some(held) = optimizer.state_bytes(&param_bytes) else {
        return Ok(());
    };
    tracing::info!(
        target: "ember",
        "rank {}: optimizer state for {} of {} parameters, {} bytes",
        strategy.collective().rank(),
        held.len(),
        param_bytes.len(),
        held.iter().map(|(_, bytes)| bytes).sum::<u64>()
    );
    match strategy.optimizer_sharding() {
        Some(sharding) => sharding.check(&held),
        None => Ok(()),
    }
}
