//! `--trainer.max_time` and the Timer callback, against Lightning's Timer (its tests in
//! `tests/tests_pytorch/callbacks/test_timer.py`): the budget stops fit after the step that
//! spends it (or at the epoch's end with `interval: epoch`), with a checkpoint that resumes
//! exactly; a budget spent before training (zero, or by the runs a resumed fit continues, whose
//! time goes into the checkpoint) stops fit before its first step; a Timer among the callbacks
//! wins over `max_time`.

use std::path::Path;
use std::time::Duration;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{Callback, Timer, TimerConfig, TimerInterval};
use ember::checkpoint::Checkpoint;
use ember::{FitOutcome, Stage, Trainer, TrainerOptions};
use ember_acceptance::regression::{Regression, data, quiet_options, serial, weight_bits};

type B = Autodiff<Flex>;

/// Options for a quiet 3-epoch run (4 training batches an epoch) writing under `root`.
fn options(root: &Path) -> TrainerOptions {
    quiet_options(root, 3)
}

fn fit(options: TrainerOptions, callbacks: Vec<Box<dyn Callback>>) -> FitOutcome<Regression<B>> {
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .unwrap()
        .with_callbacks(callbacks);
    let model = Regression::new(trainer.device());
    trainer.fit(model, &mut data(40, 20, 10)).unwrap()
}

fn timer(duration: Option<Duration>, interval: TimerInterval) -> Timer {
    Timer::new(TimerConfig {
        duration,
        interval,
        verbose: false,
    })
}

/// The training seconds the Timer's state in the checkpoint at `path` records.
fn recorded_training_time(path: &Path) -> f64 {
    let bytes = std::fs::read(path).unwrap();
    let checkpoint = Checkpoint::decode(&bytes, path).unwrap();
    let states: serde_json::Value =
        serde_json::from_slice(&checkpoint.sections["callbacks"]).unwrap();
    states["Timer"]["time_elapsed"]["train"].as_f64().unwrap()
}

#[test]
fn a_spent_budget_stops_fit_after_the_step_with_a_checkpoint_that_resumes_exactly() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = fit(options(dir.path()), vec![]);
    assert_eq!(whole.global_step, 12);

    // Lightning compares `time_elapsed >= duration` when fit starts and after every step: a
    // zero budget trains nothing, a nanosecond is spent by the first step.
    let zero = TrainerOptions {
        max_time: Some(Duration::ZERO),
        ..options(dir.path())
    };
    let none = fit(zero, vec![]);
    assert_eq!(
        (none.global_step, none.epochs, none.stopped_early),
        (0, 0, true)
    );
    let timed = TrainerOptions {
        max_time: Some(Duration::from_nanos(1)),
        ..options(dir.path())
    };
    let stopped = fit(timed, vec![]);
    assert!(stopped.stopped_early);
    assert_eq!((stopped.global_step, stopped.epochs), (1, 1));
    let checkpoint = stopped.best_model_path.expect("a checkpoint at the stop");
    assert!(
        checkpoint.ends_with("epoch=0-step=1.ckpt"),
        "{checkpoint:?}"
    );

    // Resumed without a budget, the fit ends as the uninterrupted one did, bitwise.
    let resumed = TrainerOptions {
        ckpt_path: Some(checkpoint),
        ..options(dir.path())
    };
    let resumed = fit(resumed, vec![]);
    assert_eq!(resumed.global_step, 12);
    assert_eq!(weight_bits(&resumed.model), weight_bits(&whole.model));
}

#[test]
fn with_interval_epoch_the_budget_is_checked_at_the_end_of_each_epoch() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let timer = timer(Some(Duration::from_nanos(1)), TimerInterval::Epoch);
    let out = fit(options(dir.path()), vec![Box::new(timer)]);
    assert!(out.stopped_early);
    assert_eq!((out.global_step, out.epochs), (4, 1));
}

#[test]
fn a_resumed_fit_counts_the_training_time_already_spent() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let first = timer(Some(Duration::from_nanos(1)), TimerInterval::Step);
    let clock = first.clock();
    let stopped = fit(options(dir.path()), vec![Box::new(first)]);
    assert_eq!(clock.time_remaining(Stage::Fit), Some(Duration::ZERO));
    let path = stopped.best_model_path.clone().unwrap();
    let spent = recorded_training_time(&path);
    assert!(spent > 0.0 && spent <= clock.time_elapsed(Stage::Fit).as_secs_f64());

    // Half of what the checkpoint says was spent: a fit that did not count it would take a
    // step before its own clock reached that; this one stops before its first step.
    let resumed = TrainerOptions {
        ckpt_path: Some(path.clone()),
        ..options(dir.path())
    };
    let half = timer(
        Some(Duration::from_secs_f64(spent / 2.0)),
        TimerInterval::Step,
    );
    let clock = half.clock();
    let out = fit(resumed, vec![Box::new(half)]);
    assert_eq!((out.global_step, out.steps), (1, 0));
    assert!(clock.time_elapsed(Stage::Fit).as_secs_f64() >= spent);

    // The same with no budget only measures.
    let resumed = TrainerOptions {
        ckpt_path: Some(path),
        ..options(dir.path())
    };
    let out = fit(resumed, vec![Box::new(timer(None, TimerInterval::Step))]);
    assert_eq!(out.global_step, 12);
}

#[test]
fn a_timer_among_the_callbacks_wins_over_max_time() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        max_time: Some(Duration::ZERO),
        ..options(dir.path())
    };
    let only_measures = timer(None, TimerInterval::Step);
    let clock = only_measures.clock();
    let out = fit(o, vec![Box::new(only_measures)]);
    assert!(!out.stopped_early);
    assert_eq!(out.global_step, 12);
    assert_eq!(clock.time_remaining(Stage::Fit), None);
    let (trained, validated) = (
        clock.time_elapsed(Stage::Fit),
        clock.time_elapsed(Stage::Validate),
    );
    assert!(
        trained > validated && validated > Duration::ZERO,
        "{trained:?} {validated:?}"
    );
}

#[test]
fn config_names_the_timer_and_max_time_and_refuses_bad_durations() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    let timer = serde_json::json!([{"class_path": "Timer", "init_args": {"duration": "00:00:00:00", "interval": "epoch"}}]);
    o.set("callbacks", &timer).unwrap();
    let out = fit(o.clone(), vec![]);
    assert_eq!((out.global_step, out.stopped_early), (0, true));

    let bad = serde_json::json!([{"class_path": "Timer", "init_args": {"duration": "1 hour"}}]);
    o.set("callbacks", &bad).unwrap();
    let e = Trainer::<B>::on_device(FlexDevice, o)
        .err()
        .expect("a bad duration");
    let e = format!("{e:#}");
    assert!(e.contains("Timer") && e.contains("DD:HH:MM:SS"), "{e}");

    let mut o = options(dir.path());
    o.set("max_time", &serde_json::json!({"minutes": 1}))
        .unwrap();
    assert_eq!(o.max_time, Some(Duration::from_secs(60)));
    let e = o
        .set("max_time", &serde_json::json!("1:00:00"))
        .unwrap_err();
    assert_eq!(e.flag, "--trainer.max_time");
}
