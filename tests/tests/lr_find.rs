//! The learning-rate finder, as Lightning's tests/tests_pytorch/tuner/test_lr_finder.py checks
//! it: the rates rise as its schedulers give them (`test_suggestion_parameters_work`), a
//! diverging loss stops the sweep early (`test_lr_finder_ends_before_num_training`), and the
//! model and the Trainer are as they were afterwards (`test_trainer_reset_correctly`): the model's
//! weights and batch-norm statistics bitwise, and a fit after the sweep equals a fit without it.

use burn::module::Module;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::options::LrFind;
use ember::{Trainer, TrainerOptions};
use ember_acceptance::regression::serial;
use ember_acceptance::resume::float_bytes;
use ember_acceptance::tuned::{Tuned, data, options};

type B = Autodiff<Flex>;

fn trainer(options: TrainerOptions) -> Trainer<B> {
    Trainer::<B>::on_device(FlexDevice, options).unwrap()
}

#[test]
fn the_sweep_raises_the_rate_and_leaves_the_model_and_the_trainer_as_they_were() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let settings = LrFind {
        num_training: 20,
        min_lr: 1e-4,
        max_lr: 0.1,
        early_stop_threshold: None,
        ..Default::default()
    };
    // A fit without the sweep, and one after it from the same weights (a Trainer seeds the
    // backend, so the model made right after it draws the same weights).
    let mut plain = trainer(options(dir.path(), 3));
    let model = Tuned::<B>::new(plain.device());
    let expected = float_bytes(&plain.fit(model, &mut data(4)).unwrap().model);
    let mut tuned = trainer(options(dir.path(), 3));
    let model = Tuned::<B>::new(tuned.device());
    // A record holds the running statistics too, as a checkpoint does.
    let record = |model: &Tuned<B>| {
        BinBytesRecorder::<FullPrecisionSettings>::new()
            .record(model.clone().into_record(), ())
            .unwrap()
    };
    let before = record(&model);
    let finding = tuned.lr_find(&model, &mut data(4), &settings).unwrap();
    let after = record(&model);
    assert_eq!(after, before, "weights and running statistics untouched");
    // 4 batches per epoch: 20 steps over 5 epochs, one rate each, as Lightning's
    // `_ExponentialLR` gives them: `min_lr`, then `(step + 1) / 20` of the way to `max_lr`.
    let rates: Vec<f64> = (0..20)
        .map(|s| match s {
            0 => settings.min_lr,
            s => settings.min_lr * (settings.max_lr / settings.min_lr).powf((s + 1) as f64 / 20.0),
        })
        .collect();
    assert_eq!(finding.lrs, rates);
    assert_eq!(finding.losses.len(), 20);
    assert!(finding.losses.iter().all(|l| l.is_finite()));
    let suggested = finding.suggestion().expect("20 steps are enough");
    assert!(rates[10..19].contains(&suggested), "{suggested}");
    let after = tuned.fit(model, &mut data(4)).unwrap();
    assert_eq!(
        float_bytes(&after.model),
        expected,
        "the fit after the sweep is the same fit"
    );
    assert_eq!(after.global_step, 12, "the Trainer's own max_epochs again");
}

#[test]
fn a_diverging_loss_ends_the_sweep_early() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let settings = LrFind {
        num_training: 60,
        min_lr: 1e-3,
        max_lr: 1e4,
        ..Default::default()
    };
    let mut tuned = trainer(options(dir.path(), 1));
    let model = Tuned::<B>::new(tuned.device());
    let finding = tuned.lr_find(&model, &mut data(4), &settings).unwrap();
    let n = finding.losses.len();
    assert!(n < 60, "stopped after {n} steps");
    let best = finding.losses.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(finding.losses[n - 1] > 4.0 * best, "{:?}", finding.losses);
}
