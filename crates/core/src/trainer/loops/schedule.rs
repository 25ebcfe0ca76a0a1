//! The loops' arithmetic, apart from any backend: how many batches each loop runs, when the
//! optimizer steps, when validation runs, when metrics are logged and when fit stops.

use crate::error::FlagError;
use crate::options::{Limit, TrainerOptions};

/// Batches an evaluation or predict loop runs: `limit` of what the loader has, or
/// `fast_dev_run` batches in a fast dev run.
pub fn eval_batches(options: &TrainerOptions, limit: Limit, available: usize) -> usize {
    match options.fast_dev_run {
        0 => limit.of(available),
        n => Limit::Batches(n).of(available),
    }
}

/// What `fit` will do, decided from the options and the loaders' sizes before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitSchedule {
    /// Training batches per epoch.
    pub train_batches: usize,
    /// Batches per validation pass of each val loader (none, or all 0: no validation).
    pub val_batches: Vec<usize>,
    /// Validation batches before training, of each val loader.
    pub sanity_batches: Vec<usize>,
    /// Train on the loader's order (`overfit_batches`).
    pub unshuffled: bool,
    /// Batches whose gradients are summed per optimizer step.
    pub accumulate: u64,
    /// Optimizer steps at most.
    pub max_steps: Option<u64>,
    /// Optimizer steps before a stop request is honoured.
    min_steps: u64,
    /// Validate every this many training batches.
    val_every: usize,
    check_val_every_n_epoch: Option<u64>,
    min_epochs: u64,
    log_every_n_steps: u64,
}

impl FitSchedule {
    /// The schedule for a loader of `train_available` batches and val loaders of
    /// `val_available` batches each (limits apply to each loader, as in Lightning). Refuses
    /// (naming the flag) a `val_check_interval` longer than an epoch while validation also
    /// counts epochs.
    pub fn new(
        o: &TrainerOptions,
        train_available: usize,
        val_available: &[usize],
    ) -> Result<Self, FlagError> {
        let fast = o.fast_dev_run;
        let overfit = o.overfit_batches.of(train_available);
        let train_batches = if fast > 0 {
            Limit::Batches(fast).of(train_available)
        } else if overfit > 0 {
            overfit
        } else {
            o.limit_train_batches.of(train_available)
        };
        let val_batches: Vec<usize> = (val_available.iter())
            .map(|&v| match v {
                v if fast > 0 => Limit::Batches(fast).of(v),
                v if overfit > 0 => overfit.min(v),
                v => o.limit_val_batches.of(v),
            })
            .collect();
        let validates = val_batches.iter().any(|&b| b > 0);
        let val_every = match o.val_check_interval {
            Limit::Fraction(f) => ((train_batches as f64 * f).floor() as usize).max(1),
            Limit::Batches(b) => usize::try_from(b).unwrap_or(usize::MAX),
        };
        let epoch_checks = o.check_val_every_n_epoch.is_some();
        if epoch_checks && validates && train_batches > 0 && val_every > train_batches {
            return Err(FlagError::new(
                "--trainer.val_check_interval",
                val_every.to_string(),
                format!(
                    "at most the {train_batches} training batches of an epoch, or set check_val_every_n_epoch=null to count batches across epochs"
                ),
            ));
        }
        let sanity_batches = (val_batches.iter())
            .map(|&val| match o.num_sanity_val_steps {
                _ if fast > 0 => 0,
                Some(s) => usize::try_from(s).unwrap_or(usize::MAX).min(val),
                None => val,
            })
            .collect();
        Ok(Self {
            train_batches,
            val_batches,
            sanity_batches,
            unshuffled: fast == 0 && overfit > 0,
            accumulate: o.accumulate_grad_batches,
            max_steps: if fast > 0 { Some(fast) } else { o.max_steps },
            min_steps: o.min_steps.unwrap_or(0),
            val_every,
            check_val_every_n_epoch: o.check_val_every_n_epoch,
            min_epochs: o.min_epochs,
            log_every_n_steps: o.log_every_n_steps,
        })
    }

    /// Where a run resumes that stopped in `epoch` after `batches_done` of this process's
    /// batches (`None`: after all of the epoch's): the epoch and the batches of it to skip.
    pub fn resume_at(&self, epoch: u64, batches_done: Option<usize>) -> (u64, usize) {
        match batches_done {
            Some(done) if done < self.train_batches => (epoch, done),
            _ => (epoch + 1, 0),
        }
    }

    /// Whether the optimizer steps after batch `batch_idx` of an epoch: every `accumulate`
    /// batches, and after the last batch of the epoch.
    pub fn steps_after(&self, batch_idx: usize) -> bool {
        (batch_idx + 1).is_multiple_of(self.accumulate as usize)
            || batch_idx + 1 == self.train_batches
    }

    /// Whether step metrics are written after a batch: on optimizer steps that are a multiple
    /// of `log_every_n_steps`.
    pub fn logs_after(&self, stepped: bool, global_step: u64) -> bool {
        stepped && global_step.is_multiple_of(self.log_every_n_steps.max(1))
    }

    /// Whether validation runs after batch `batch_idx` of `epoch` (with
    /// `check_val_every_n_epoch` null, training batches are counted across epochs).
    pub fn validates_after(&self, epoch: u64, batch_idx: usize) -> bool {
        let batches_seen = epoch * self.train_batches as u64 + batch_idx as u64 + 1;
        self.val_batches.iter().any(|&b| b > 0)
            && match self.check_val_every_n_epoch {
                Some(n) => {
                    (epoch + 1).is_multiple_of(n) && (batch_idx + 1).is_multiple_of(self.val_every)
                }
                None => batches_seen.is_multiple_of(self.val_every as u64),
            }
    }

    /// Why fit trains nothing, if it does not: no training batches, or `max_steps` already
    /// reached (Lightning's `FitLoop.skip`/`done` before the first epoch).
    pub fn nothing_to_train(&self, global_step: u64) -> Option<String> {
        match self.max_steps {
            _ if self.train_batches == 0 => Some("fit stopped: no training batches".into()),
            Some(max) if global_step >= max => {
                Some(format!("fit stopped: max_steps={max} reached"))
            }
            _ => None,
        }
    }

    /// Whether fit ends after `epochs_done` complete epochs: `max_steps` reached, or a stop
    /// asked for once `min_epochs` epochs are complete and `min_steps` steps taken (Lightning's
    /// `_can_stop_early`: within an epoch, the epoch under way does not count).
    pub fn stops(&self, global_step: u64, should_stop: bool, epochs_done: u64) -> bool {
        self.max_steps.is_some_and(|m| global_step >= m)
            || (should_stop && epochs_done >= self.min_epochs && global_step >= self.min_steps)
    }
}

/// This process's batches done in an epoch of which each of `written_world` processes had done
/// `done` batches: the same share of the epoch. Ranks take interleaved positions, so `done`
/// batches on each of N ranks cover the epoch's first `done × N` batches' worth of positions;
/// where that does not divide among this world's ranks it is rounded down, so a few samples
/// are trained again. A `written_world` of 0 (not recorded) is taken as this one.
pub fn batches_here(done: u64, written_world: u64, world: u64) -> usize {
    let here = match written_world {
        0 => u128::from(done),
        n => u128::from(done) * u128::from(n) / u128::from(world.max(1)),
    };
    usize::try_from(here).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(o: TrainerOptions, train: usize, val: &[usize]) -> FitSchedule {
        FitSchedule::new(&o, train, val).unwrap()
    }

    #[test]
    fn fast_dev_run_and_overfit_set_the_batch_counts() {
        let fast = TrainerOptions {
            fast_dev_run: 3,
            ..TrainerOptions::default()
        };
        let s = schedule(fast, 10, &[5, 1]);
        assert_eq!(
            (s.train_batches, s.val_batches, s.sanity_batches),
            (3, vec![3, 1], vec![0, 0])
        );
        assert_eq!(s.max_steps, Some(3));
        let overfit = TrainerOptions {
            overfit_batches: Limit::Batches(4),
            ..TrainerOptions::default()
        };
        let s = schedule(overfit, 10, &[2]);
        assert_eq!(
            (s.train_batches, s.val_batches, s.unshuffled),
            (4, vec![2], true)
        );
        let s = schedule(TrainerOptions::default(), 10, &[]);
        assert_eq!(
            (s.train_batches, s.val_batches, s.sanity_batches),
            (10, vec![], vec![])
        );
    }

    /// Lightning applies `limit_val_batches` and `num_sanity_val_steps` to each val loader
    /// (`_EvaluationLoop.max_batches` is a list; `_run_sanity_check` takes the minimum per
    /// loader).
    #[test]
    fn limits_and_the_sanity_check_apply_to_each_val_loader() {
        let o = TrainerOptions {
            limit_val_batches: Limit::Batches(3),
            num_sanity_val_steps: Some(2),
            ..TrainerOptions::default()
        };
        let s = schedule(o, 10, &[5, 1, 0]);
        assert_eq!(s.val_batches, [3, 1, 0]);
        assert_eq!(s.sanity_batches, [2, 1, 0]);
        assert!(s.validates_after(0, 9));
        let none = TrainerOptions {
            limit_val_batches: Limit::Batches(0),
            ..TrainerOptions::default()
        };
        assert!(!schedule(none, 10, &[5, 1]).validates_after(0, 9));
    }

    #[test]
    fn steps_follow_accumulation_and_the_epoch_end() {
        let o = TrainerOptions {
            accumulate_grad_batches: 3,
            ..TrainerOptions::default()
        };
        let s = schedule(o, 7, &[]);
        let steps: Vec<usize> = (0..7).filter(|&i| s.steps_after(i)).collect();
        assert_eq!(steps, [2, 5, 6]);
        assert!(s.logs_after(true, 50) && !s.logs_after(true, 49) && !s.logs_after(false, 50));
    }

    #[test]
    fn validation_counts_batches_within_or_across_epochs() {
        let o = TrainerOptions {
            val_check_interval: Limit::Fraction(0.5),
            check_val_every_n_epoch: Some(2),
            ..TrainerOptions::default()
        };
        let s = schedule(o, 10, &[3]);
        let when: Vec<(u64, usize)> = (0..2)
            .flat_map(|e| (0..10).map(move |b| (e, b)))
            .filter(|&(e, b)| s.validates_after(e, b))
            .collect();
        assert_eq!(when, [(1, 4), (1, 9)]);
        let across = TrainerOptions {
            val_check_interval: Limit::Batches(15),
            check_val_every_n_epoch: None,
            ..TrainerOptions::default()
        };
        let s = schedule(across, 10, &[3]);
        // Batch 4 of epoch 1 is the 15th training batch, batch 5 the 16th.
        assert!(s.validates_after(1, 4) && !s.validates_after(1, 5));
        let too_long = TrainerOptions {
            val_check_interval: Limit::Batches(15),
            ..TrainerOptions::default()
        };
        let e = FitSchedule::new(&too_long, 10, &[3]).unwrap_err();
        assert_eq!(
            (e.flag.as_str(), e.value.as_str()),
            ("--trainer.val_check_interval", "15")
        );
    }

    #[test]
    fn stops_and_resume_positions() {
        let o = TrainerOptions {
            max_steps: Some(5),
            min_epochs: 2,
            ..TrainerOptions::default()
        };
        let s = schedule(o, 10, &[]);
        assert!(s.stops(5, false, 0));
        assert!(!s.stops(4, true, 1) && s.stops(4, true, 2));
        assert_eq!(s.resume_at(3, Some(10)), (4, 0));
        assert_eq!(s.resume_at(3, Some(4)), (3, 4));
        assert_eq!(s.resume_at(3, None), (4, 0));
    }

    #[test]
    fn a_position_written_by_another_world_size_keeps_its_share_of_the_epoch() {
        // 6 batches on each of 2 ranks: the first 12 batches' positions.
        assert_eq!(batches_here(6, 2, 1), 12);
        assert_eq!(batches_here(6, 2, 4), 3);
        // 5 batches on each of 2 ranks, read by 4: rounded down (a few samples again).
        assert_eq!(batches_here(5, 2, 4), 2);
        assert_eq!(batches_here(7, 3, 3), 7);
        // Not recorded (written before ember recorded it): this world's.
        assert_eq!(batches_here(7, 0, 2), 7);
    }
}
