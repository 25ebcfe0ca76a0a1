//! The loops of `fit` and of an evaluation pass: what runs between `on_fit_start` and
//! `on_fit_end`, talking to the strategy and its precision plugin wherever runs differ.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::{GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::FloatDType;
use burn::tensor::backend::AutodiffBackend;

use super::checkpoint::Checkpoint;
use super::data::Loader;
use super::log::{MetricCollector, StepLog};
use super::module::{EvalModule, Optimizers, SchedulerInterval, TrainingModule};
use super::options::Limit;
use super::run::{FitParts, Run};
use super::signals::{self, StopSignals};
use super::{FitOutcome, Inner, Trainer, dtype};
use crate::callbacks;
use crate::cli::Stage;
use crate::plugins::access::{ModelGradients, ModelWeights};

impl<B: AutodiffBackend> Trainer<B> {
    /// Batches of one evaluation pass with their batch hooks; returns the pass's epoch metrics.
    pub(super) fn eval_pass<E, I, Bt>(
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

    /// The model validation runs on during `fit`: the inner module, in the compute types.
    fn eval_model<M: AutodiffModule<B>>(&self, model: &M) -> M::InnerModule {
        let precision = self.precision();
        if precision.casts_for_compute() {
            dtype::compute_as(model.valid(), precision)
        } else {
            model.valid()
        }
    }

    /// The stop signal and early-stop decision every rank acts on: each rank's own in a
    /// one-process run; with several, the strategy makes a stop anywhere stop all ranks at the
    /// same batch (a rank that stopped alone would leave the others waiting in their next
    /// all-reduce).
    fn agree_on_stop(
        &self,
        signal: Option<&'static str>,
        should_stop: bool,
    ) -> anyhow::Result<(Option<&'static str>, bool)> {
        let code = signal.map_or(0, |s| {
            1 + signals::NAMES.iter().position(|n| *n == s).unwrap_or(0)
        });
        let mut flags = [code as f64, f64::from(u8::from(should_stop))];
        self.strategy.agree(&mut flags)?;
        let signal = (flags[0] > 0.0).then(|| signals::NAMES[flags[0] as usize - 1]);
        Ok((signal, flags[1] > 0.0))
    }

    pub(super) fn fit_loop<M, I, Bt>(
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

        if self.precision().casts_for_compute() {
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
            if self.precision().casts_for_compute() {
                // burn 0.21 rebuilds optimizer state in the device's default float type, which
                // a mixed precision sets to the low one: the f32 masters' Adam moments would come
                // back as {low:?} and the first step would fail.
                let low = dtype::compute_dtype(self.precision().precision());
                anyhow::bail!(
                    "cannot resume fit from {} under a mixed precision yet: burn 0.21 restores the optimizer's state in the device's float type ({low:?}), not in the f32 of the master weights; resume with a true precision, or load the weights only (validate/test/predict)",
                    path.display()
                );
            }
            let checkpoint = Checkpoint::decode(&self.checkpoint_io().load(&path)?, &path)?;
            model = checkpoint.load_model::<B, M>(model, &path)?;
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
            let precision = &mut self.strategy.parts_mut().precision;
            if let Some(bytes) = precision
                .state_key()
                .and_then(|k| checkpoint.sections.get(k))
            {
                precision.load_state(bytes).with_context(|| {
                    format!(
                        "{}: corrupt {} section",
                        path.display(),
                        precision.state_key().unwrap_or_default()
                    )
                })?;
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
        self.strategy
            .setup_weights(&mut ModelWeights::<B, M>::new(&mut model))?;
        // Calls a hook with a checkpoint saver over the current model, optimizer and scheduler.
        macro_rules! fit_hook {
            ($hook:ident) => {
                run.hook_fit(
                    &FitParts::<B, M, _, _>::new(&model, &optimizer, &scheduler, self.precision()),
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
                let precision = self.precision();
                let loss = if precision.casts_for_compute() {
                    dtype::compute_as(model.clone(), precision).training_step(batch, &mut log)
                } else {
                    model.training_step(batch, &mut log)
                };
                let loss = match precision.loss_scale() {
                    Some(scale) => loss.cast(FloatDType::F32).mul_scalar(scale),
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
                    let mut view = ModelGradients::<B, M>::new(&model, &mut grads);
                    self.strategy.reduce_gradients(&mut view)?;
                    let precision = &mut self.strategy.parts_mut().precision;
                    let finite = precision.unscale_gradients(&mut view);
                    for (name, value) in precision.step_metrics() {
                        log.log(name, value);
                    }
                    if interval == SchedulerInterval::Step {
                        lr = scheduler.step();
                    }
                    if finite {
                        if let Some(threshold) = o.gradient_clip_val {
                            precision.clip_gradients(
                                &mut view,
                                o.gradient_clip_algorithm,
                                threshold,
                            );
                        }
                        model = optimizer.step(lr, model, grads);
                        self.strategy.on_optimizer_step(
                            &mut ModelWeights::<B, M>::new(&mut model),
                            run.state.global_step + 1,
                        )?;
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
                    if self.is_global_zero() {
                        let parts = FitParts::<B, M, _, _>::new(
                            &model,
                            &optimizer,
                            &scheduler,
                            self.precision(),
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
        self.strategy
            .teardown(&mut ModelWeights::<B, M>::new(&mut model))?;
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
