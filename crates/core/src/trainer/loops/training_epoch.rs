//! The training epoch loop (Lightning's `_TrainingEpochLoop`): the batches of one epoch, each
//! a training step, an optimizer step every `accumulate_grad_batches` batches, metric
//! logging, validation when due, and the stop checks. Its state is the [`FitLoop`]'s.

use std::cell::RefCell;
use std::marker::PhantomData;

use burn::optim::GradientsParams;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::AutodiffBackend;

use super::fit::FitLoop;
use super::step::{ManualOptimization, StepContext};
use crate::callbacks::Callback;
use crate::plugins::{lockstep, precision};
use crate::stage::Stage;
use crate::trainer::data::Loader;
use crate::trainer::data::mix64;
use crate::trainer::log::StepLog;
use crate::trainer::module::{
    BatcherFor, EpochEnd, MissingStep, SchedulerInterval, TrainingModule,
};
use crate::trainer::run::FitParts;

impl<B, M> FitLoop<'_, B, M>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    /// Runs the epoch `self.position.epoch` (from its `skip`th batch when resuming); returns
    /// the loop and whether fit ends after the epoch. The loop passes by value because burn's
    /// optimizer takes the model and gives it back.
    pub(super) fn run_epoch<I, Bt>(
        mut self,
        train: &Loader<I>,
        val: &[Loader<I>],
        batcher: &Bt,
    ) -> anyhow::Result<(Self, bool)>
    where
        Bt: BatcherFor<B, I, M>,
        I: Send + 'static,
    {
        let epoch = self.position.epoch;
        let _span = self.trainer.profiler.span("training epoch");
        self.run.state.epoch = epoch;
        self.run.state.batches_done = self.position.skip;
        // A per-epoch scheduler steps when an epoch begins, so a checkpoint written anywhere
        // in epoch e holds the scheduler as it was for e; an epoch resumed part-way through
        // keeps the rate it had.
        if self.opt.interval == SchedulerInterval::Epoch && self.position.skip == 0 {
            for slot in &mut self.opt.slots {
                slot.lr = slot.scheduler.step();
            }
        }
        tried!(self, self.fit_hook(|c, x| c.on_train_epoch_start(x)));
        tried!(self, self.apply_finetuning());
        let resumed_at = std::mem::take(&mut self.position.skip);
        let range = resumed_at..self.schedule.train_batches;
        let mut batches = tried!(self, train.pass(self.trainer.seed, epoch, range));
        let mut stop = false;
        while let Some((batch_idx, batch)) = {
            let _span = self.trainer.profiler.span("data fetch");
            let scope = self.trainer.batch_scope;
            tried!(
                self,
                batches.next_batch_scoped::<B, _>(batcher, &self.trainer.device, scope)
            )
        } {
            let span = self.trainer.profiler.span("training batch");
            self.run.state.batch_size = batches.last_len();
            lockstep::at_step(Some(self.run.state.global_step));
            self = self.train_batch(batch_idx, batch)?;
            tried!(self, self.fit_hook(|c, x| c.on_train_batch_end(x)));
            drop(span);
            if self.schedule.validates_after(epoch, batch_idx) {
                let batches = self.schedule.val_batches.clone();
                tried!(self, self.validate(val, batcher, batches, true));
            }
            let received = self.signals.received();
            let stop_now = self.agree_on_stop(received, self.run.state.should_stop);
            let (signal, should_stop) = tried!(self, stop_now);
            self.run.state.should_stop = should_stop;
            if let Some(signal) = signal {
                tried!(self, self.save_on_signal(signal));
                break;
            }
            // Within the epoch, only the epochs before it count as complete.
            let state = &self.run.state;
            stop = self
                .schedule
                .stops(state.global_step, state.should_stop, epoch);
            if stop {
                break;
            }
        }
        // The epoch's last step values, as Lightning's callback_metrics hold them every step
        // (logged or not: loggers get every log_every_n_steps-th).
        let last_step = tried!(self, self.collector.take_pending(self.trainer.ranks()));
        self.run.state.callback_metrics.extend(last_step);
        let epoch_metrics = tried!(self, self.collector.take_epoch(self.trainer.ranks()));
        tried!(self, self.run.publish(&epoch_metrics, false));
        tried!(self, self.fit_hook(|c, x| c.on_train_epoch_end(x)));
        let end = EpochEnd {
            epoch,
            global_step: self.run.state.global_step,
            log_dir: self.run.state.log_dir.as_deref(),
            is_global_zero: self.trainer.is_global_zero(),
        };
        tried!(self, self.opt.model.on_train_epoch_end(&end));
        let stop_now = self.agree_on_stop(None, self.run.state.should_stop);
        self.run.state.should_stop = tried!(self, stop_now).1;
        let span = self.run.profiler.span("loggers");
        tried!(self, self.run.loggers.save());
        drop(span);
        let state = &self.run.state;
        let stop = stop
            || self.interrupted.is_some()
            || self
                .schedule
                .stops(state.global_step, state.should_stop, epoch + 1);
        Ok((self, stop))
    }

    /// One training batch: the step (on a compute copy under a mixed precision), the scaled
    /// and averaged loss's backward, and the optimizer step when it is due; under manual
    /// optimization, the model's `manual_training_step`.
    fn train_batch(mut self, batch_idx: usize, batch: M::Batch) -> anyhow::Result<Self> {
        // Random layers (dropout) draw from the backend's generator. Seeding it from the run's
        // seed and this batch's place makes a resumed run draw what the uninterrupted one did.
        let seed = batch_seed(
            self.trainer.seed,
            self.position.epoch,
            batch_idx,
            self.trainer.shard().rank,
        );
        B::seed(&self.trainer.device, seed);
        let mut log = StepLog::new(Stage::Fit);
        if self.opt.manual {
            let steps_before = self.run.state.global_step;
            self = self.manual_batch(batch, &mut log)?;
            let stepped = self.run.state.global_step > steps_before;
            tried!(self, self.end_batch(batch_idx, log, stepped));
            return Ok(self);
        }
        let loss = self.unless_panics(|fit| {
            let _span = fit.trainer.profiler.span("training step");
            fit.training_forward(batch, &mut log)
        });
        if let Some(step) = log.take_missing() {
            return Err(self.failed(MissingStep(step).into()));
        }
        let opt = &mut self.opt;
        self.last_loss = Some(loss.clone().detach());
        let loss = precision::scale_loss(self.trainer.precision(), loss);
        let accumulate = self.schedule.accumulate;
        let loss = if accumulate > 1 {
            loss.div_scalar(accumulate as f64)
        } else {
            loss
        };
        let backward = self.trainer.profiler.span("backward");
        let mut grads = GradientsParams::from_grads(loss.backward(), &opt.model);
        drop(backward);
        let steps_now = self.schedule.steps_after(batch_idx);
        if accumulate > 1 {
            opt.accumulator.accumulate(&opt.model, grads);
            grads = if steps_now {
                opt.accumulator.grads()
            } else {
                GradientsParams::new()
            };
        }
        if steps_now {
            self = self.optimizer_step(grads, &mut log)?;
        }
        tried!(self, self.end_batch(batch_idx, log, steps_now));
        Ok(self)
    }

    /// The model's `training_step` on `batch`: on a copy in the compute types under a mixed
    /// precision (gradients still reach the model's own parameters).
    pub(super) fn training_forward(
        &self,
        batch: M::Batch,
        log: &mut StepLog<B>,
    ) -> burn::tensor::Tensor<B, 1> {
        match precision::compute_copy(self.trainer.precision(), &self.opt.model) {
            Some(copy) => copy.training_step(batch, log),
            None => self.opt.model.training_step(batch, log),
        }
    }

    /// Collects what the batch logged and writes the step metrics when it is a logging step.
    fn end_batch(
        &mut self,
        batch_idx: usize,
        mut log: StepLog<B>,
        stepped: bool,
    ) -> anyhow::Result<()> {
        let logging_step = self
            .schedule
            .logs_after(stepped, self.run.state.global_step);
        self.collector.collect(&mut log, logging_step);
        self.run
            .state
            .progress_bar_metrics
            .append(&mut self.collector.prog_bar);
        if logging_step && !self.collector.step.is_empty() {
            let mut metrics = self.collector.take_step(self.trainer.ranks())?;
            self.run.state.callback_metrics.extend(metrics.clone());
            metrics.insert("epoch".into(), self.position.epoch as f64);
            let step = self.run.state.log_step();
            let _span = self.run.profiler.span("loggers");
            self.run.loggers.log_metrics(&metrics, step)?;
        }
        self.run.state.batch_idx = batch_idx;
        self.run.state.batches_done = batch_idx + 1;
        Ok(())
    }

    /// Steps optimizer 0 with `grads` (reduced, unscaled, checked and clipped as the options
    /// say) and logs what the precision plugin reports.
    fn optimizer_step(
        mut self,
        grads: GradientsParams,
        log: &mut StepLog<B>,
    ) -> anyhow::Result<Self> {
        let options = &self.trainer.options;
        let clip = options
            .gradient_clip_val
            .map(|threshold| (options.gradient_clip_algorithm, threshold));
        let mut cx = StepContext::new(
            &mut *self.trainer,
            self.run.step_parts(),
            self.opt.steps_schedulers(),
        );
        let slot = (0, &mut self.opt.slots[0]);
        self.opt.model = cx.step(slot, self.opt.model, grads, clip)?;
        cx.log_metrics(log);
        Ok(self)
    }

    /// The model's `manual_training_step`, with the optimizers to step.
    fn manual_batch(mut self, batch: M::Batch, log: &mut StepLog<B>) -> anyhow::Result<Self> {
        let _span = self.trainer.profiler.span("training step");
        let mut manual = ManualOptimization {
            cx: StepContext::new(
                &mut *self.trainer,
                self.run.step_parts(),
                self.opt.steps_schedulers(),
            ),
            slots: &mut self.opt.slots,
            model: PhantomData,
        };
        self.opt.model = self
            .opt
            .model
            .manual_training_step(batch, &mut manual, log)?;
        manual.cx.log_metrics(log);
        Ok(self)
    }

    /// Writes the checkpoint a stop signal asks for (rank 0) and records where it went.
    fn save_on_signal(&mut self, signal: &'static str) -> anyhow::Result<()> {
        let state = &self.run.state;
        let dir = state
            .log_dir
            .clone()
            .unwrap_or_else(|| self.trainer.options.default_root_dir.clone());
        let path = dir.join("checkpoints").join(format!(
            "{}-epoch={}-step={}.ckpt",
            signal.to_ascii_lowercase(),
            self.position.epoch,
            state.global_step
        ));
        let precision = self.trainer.precision();
        let model = RefCell::new(&mut self.opt.model);
        let view = (&model, self.last_loss.as_ref());
        let parts = FitParts::new(view, &self.opt.slots, precision, self.gather.as_ref());
        if self.trainer.is_global_zero() {
            let _span = self.trainer.profiler.span("checkpoint");
            let run = &*self.run;
            let callbacks: Vec<&dyn Callback> = run.callbacks.iter().map(|c| c.as_ref()).collect();
            let io = run.checkpoint_io.as_ref();
            let (seed, hparams) = (run.seed, &run.hparams);
            parts.save(io, (seed, hparams), &path, &run.state, (&callbacks, None))?;
            run.checkpoint_io.wait()?;
            eprintln!(
                "received {signal}: stopped after step {}, checkpoint saved to {}; resume with --trainer.ckpt_path={}",
                run.state.global_step,
                path.display(),
                path.display()
            );
        }
        parts.serve_state()?;
        self.interrupted = Some(path);
        self.trainer.requeue_after(signal)
    }
}

/// The backend's seed for one training batch: the run's seed mixed with the epoch, the batch
/// and the rank (so ranks draw different dropout masks), through SplitMix64's finaliser.
pub(super) fn batch_seed(seed: u64, epoch: u64, batch_idx: usize, rank: usize) -> u64 {
    mix64(
        seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (batch_idx as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ (rank as u64).wrapping_mul(0x1656_67B1_9E37_79F9),
    )
}

#[cfg(test)]
mod tests {
    use super::batch_seed;

    #[test]
    fn batch_seeds_differ_by_epoch_batch_and_rank() {
        let base = batch_seed(42, 1, 7, 0);
        assert_eq!(base, batch_seed(42, 1, 7, 0));
        for other in [
            batch_seed(43, 1, 7, 0),
            batch_seed(42, 2, 7, 0),
            batch_seed(42, 1, 8, 0),
            batch_seed(42, 1, 7, 1),
        ] {
            assert_ne!(base, other);
        }
    }
}
