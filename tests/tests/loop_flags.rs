//! The loop flags against Lightning's rules: a table of cases, each flags → optimizer steps,
//! validation passes and epochs run (or the flag refused), with the Lightning test or source it
//! follows. Lightning paths are in Lightning-AI/pytorch-lightning: `fit_loop.py` and
//! `training_epoch_loop.py` are `src/lightning/pytorch/loops/`, `flags/` is
//! `tests/tests_pytorch/trainer/flags/`.
//!
//! The data: 40 training items in batches of 10 (4 batches an epoch), 20 validation items.

use std::cell::RefCell;
use std::rc::Rc;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{Callback, CallbackContext};
use ember::options::Limit;
use ember::{FlagError, Trainer, TrainerOptions};
use ember_acceptance::regression::{Regression, data, serial};

type B = Autodiff<Flex>;

/// What a fit did: optimizer steps, validation passes (sanity check not counted), epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ran {
    steps: u64,
    validations: usize,
    epochs: usize,
}

/// Counts validation passes and epochs; asks to stop at the first validation when told to.
#[derive(Clone, Default)]
struct Counter {
    counts: Rc<RefCell<(usize, usize)>>,
    stop_at_first_validation: bool,
}

impl Callback for Counter {
    fn name(&self) -> &str {
        "Counter"
    }
    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if !ctx.state.sanity_checking {
            self.counts.borrow_mut().0 += 1;
            ctx.state.should_stop |= self.stop_at_first_validation;
        }
        Ok(())
    }
    fn on_train_epoch_end(&mut self, _ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.counts.borrow_mut().1 += 1;
        Ok(())
    }
}

/// The outcome of a fit with `options`, or the flag it refused.
fn fit(options: TrainerOptions, stop_at_first_validation: bool) -> Result<Ran, String> {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(7),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        default_root_dir: dir.path().to_owned(),
        ..options
    };
    let counter = Counter {
        stop_at_first_validation,
        ..Counter::default()
    };
    let refused = |e: anyhow::Error| match e.downcast_ref::<FlagError>() {
        Some(flag) => flag.flag.clone(),
        None => panic!("not a flag error: {e:#}"),
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .map_err(refused)?
        .with_callback(counter.clone());
    let model = Regression::new(trainer.device());
    let out = trainer.fit(model, &mut data(40, 20, 10)).map_err(refused)?;
    let (validations, epochs) = *counter.counts.borrow();
    Ok(Ran {
        steps: out.global_step,
        validations,
        epochs,
    })
}

fn ran(steps: u64, validations: usize, epochs: usize) -> Result<Ran, String> {
    Ok(Ran {
        steps,
        validations,
        epochs,
    })
}

fn refused(flag: &str) -> Result<Ran, String> {
    Err(flag.to_owned())
}

/// One case: what it follows in Lightning, the options, whether a callback asks to stop at the
/// first validation, and the outcome.
type Case = (&'static str, TrainerOptions, bool, Result<Ran, String>);

fn o() -> TrainerOptions {
    TrainerOptions::default()
}

fn cases() -> Vec<Case> {
    vec![
        (
            "flags/test_min_max_epochs.py::test_min_max_steps_epochs (None, 3, None, -1)",
            TrainerOptions {
                max_epochs: Some(3),
                ..o()
            },
            false,
            ran(12, 3, 3),
        ),
        (
            "flags/test_min_max_epochs.py::test_min_max_steps_epochs: global_step == max_steps",
            TrainerOptions {
                max_steps: Some(6),
                ..o()
            },
            false,
            ran(6, 1, 2),
        ),
        (
            "fit_loop.py _FitLoop.__init__ (max_epochs -1 allowed) and done (max_steps bounds)",
            TrainerOptions {
                max_epochs: Some(u64::MAX),
                max_steps: Some(6),
                ..o()
            },
            false,
            ran(6, 1, 2),
        ),
        (
            "fit_loop.py _FitLoop.done: _is_max_limit_reached(processed, max_epochs=0)",
            TrainerOptions {
                max_epochs: Some(0),
                ..o()
            },
            false,
            ran(0, 0, 0),
        ),
        (
            "fit_loop.py _FitLoop.done: _is_max_limit_reached(global_step, max_steps=0)",
            TrainerOptions {
                max_epochs: Some(3),
                max_steps: Some(0),
                ..o()
            },
            false,
            ran(0, 0, 0),
        ),
        (
            "fit_loop.py _FitLoop.skip: limit_train_batches == 0 (\"No training batches\")",
            TrainerOptions {
                max_epochs: Some(3),
                limit_train_batches: Limit::Batches(0),
                ..o()
            },
            false,
            ran(0, 0, 0),
        ),
        (
            "fit_loop.py _can_stop_early: processed epochs >= min_epochs, also mid-epoch",
            TrainerOptions {
                max_epochs: Some(10),
                min_epochs: 3,
                val_check_interval: Limit::Fraction(0.5),
                ..o()
            },
            true,
            ran(12, 6, 3),
        ),
        (
            "fit_loop.py _can_stop_early: global_step >= min_steps (training_epoch_loop.done)",
            TrainerOptions {
                max_epochs: Some(10),
                min_steps: Some(6),
                ..o()
            },
            true,
            ran(6, 1, 2),
        ),
        (
            "training_epoch_loop.py _TrainingEpochLoop.done: a stop with no minimum ends the epoch",
            TrainerOptions {
                max_epochs: Some(10),
                val_check_interval: Limit::Fraction(0.5),
                ..o()
            },
            true,
            ran(2, 1, 1),
        ),
        (
            "flags/test_val_check_interval.py::test_val_check_interval (denominator 4)",
            TrainerOptions {
                max_epochs: Some(2),
                val_check_interval: Limit::Fraction(0.25),
                ..o()
            },
            false,
            ran(8, 8, 2),
        ),
        (
            "flags/test_val_check_interval.py::test_validation_check_interval_exceed_data_length_correct",
            TrainerOptions {
                max_steps: Some(12),
                val_check_interval: Limit::Batches(3),
                check_val_every_n_epoch: None,
                ..o()
            },
            false,
            ran(12, 4, 3),
        ),
        (
            "flags/test_val_check_interval.py::test_validation_check_interval_exceed_data_length_wrong",
            TrainerOptions {
                max_epochs: Some(1),
                val_check_interval: Limit::Batches(10),
                ..o()
            },
            false,
            refused("--trainer.val_check_interval"),
        ),
        (
            "flags/test_val_check_interval.py::test_val_check_interval_float_with_none_check_val_every_n_epoch",
            TrainerOptions {
                val_check_interval: Limit::Fraction(0.5),
                check_val_every_n_epoch: None,
                ..o()
            },
            false,
            refused("--trainer.val_check_interval"),
        ),
        (
            "flags/test_check_val_every_n_epoch.py: validation in every Nth epoch only",
            TrainerOptions {
                max_epochs: Some(5),
                check_val_every_n_epoch: Some(2),
                ..o()
            },
            false,
            ran(20, 2, 5),
        ),
        (
            "training_epoch_loop.py _should_accumulate: the last batch of an epoch steps",
            TrainerOptions {
                max_epochs: Some(2),
                accumulate_grad_batches: 3,
                ..o()
            },
            false,
            ran(4, 2, 2),
        ),
        (
            "flags/test_fast_dev_run.py: N batches of train and val, one epoch",
            TrainerOptions {
                max_epochs: Some(5),
                fast_dev_run: 2,
                ..o()
            },
            false,
            ran(2, 1, 1),
        ),
        (
            "flags/test_limit_batches.py: a fraction of the training batches",
            TrainerOptions {
                max_epochs: Some(2),
                limit_train_batches: Limit::Fraction(0.5),
                ..o()
            },
            false,
            ran(4, 2, 2),
        ),
        (
            "flags/test_limit_batches.py: limit_val_batches=0 disables validation",
            TrainerOptions {
                max_epochs: Some(2),
                limit_val_batches: Limit::Batches(0),
                ..o()
            },
            false,
            ran(8, 0, 2),
        ),
        (
            "flags/test_overfit_batches.py: train and validate on the first N training batches",
            TrainerOptions {
                max_epochs: Some(2),
                overfit_batches: Limit::Batches(2),
                ..o()
            },
            false,
            ran(4, 2, 2),
        ),
    ]
}

#[test]
fn the_loop_flags_follow_lightning() {
    let mut failures = Vec::new();
    for (source, options, stop, expected) in cases() {
        let got = fit(options, stop);
        if got != expected {
            failures.push(format!("{source}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
