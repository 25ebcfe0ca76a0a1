//! Manual optimization and several optimizers (Lightning's `automatic_optimization = False`,
//! `self.optimizers()`, `manual_backward`, tests/tests_pytorch/trainer/optimization/
//! test_manual_optimization.py): the model steps its own optimizers through
//! `ManualOptimization`; one manual step over every parameter is the automatic step bitwise;
//! two Adams over two parts at the same rate are one Adam over both (burn keeps Adam's state
//! per parameter) while each counts a global step; a fit stopped part-way resumes bitwise with
//! both optimizers' states; and what manual optimization cannot honour is refused as
//! Lightning refuses it. 16-mixed is in manual_optimization_16_mixed.rs (one float type per
//! process).

use burn_flex::FlexDevice;
use ember::{Plan, Precision, Trainer, TrainerOptions};
use ember_acceptance::pair::{B, Mode, fit, fit_with, options};
use ember_acceptance::regression::serial;

#[test]
fn a_manual_step_over_every_parameter_is_the_automatic_step_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let automatic = fit(options(dir.path()), Mode::Automatic).unwrap();
    let manual = fit(options(dir.path()), Mode::ManualOne).unwrap();
    assert_eq!(manual.weights, automatic.weights);
    assert_eq!(manual.losses, automatic.losses);
    assert_eq!((manual.global_step, automatic.global_step), (12, 12));
}

#[test]
fn two_optimizers_over_two_parts_step_each_part_at_its_rate() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let automatic = fit(options(dir.path()), Mode::Automatic).unwrap();
    // Adam's state is per parameter: two Adams over two parts at one rate are one Adam.
    let two = fit(options(dir.path()), Mode::ManualTwo(0.01, 0.01)).unwrap();
    assert_eq!(two.weights, automatic.weights);
    assert_eq!(
        two.global_step, 24,
        "every optimizer step counts, as in Lightning"
    );
    // Another rate for `b` changes `b` only in the first step ...
    let other = fit(
        TrainerOptions {
            max_steps: Some(2),
            ..options(dir.path())
        },
        Mode::ManualTwo(0.01, 0.05),
    )
    .unwrap();
    let same = fit(
        TrainerOptions {
            max_steps: Some(2),
            ..options(dir.path())
        },
        Mode::ManualTwo(0.01, 0.01),
    )
    .unwrap();
    // Float tensors in visit order: a.weight, a.bias, b.weight, b.bias.
    assert_eq!(other.weights[..2], same.weights[..2]);
    assert_ne!(other.weights[2..], same.weights[2..]);
    // ... and max_steps counts optimizer steps: 2 steps are one batch.
    assert_eq!((other.global_step, other.losses.len()), (2, 1));
}

#[test]
fn a_manual_fit_with_two_optimizers_resumes_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mode = Mode::ManualTwo(0.01, 0.03);
    let whole = fit(options(dir.path()), mode).unwrap();
    let path = dir.path().join("stop.ckpt");
    // Step 10 is batch 5: the second batch of the second epoch.
    let trainer = || Trainer::on_device(FlexDevice, options(dir.path())).unwrap();
    let first = fit_with(trainer(), mode, Some((10, path.clone()))).unwrap();
    let resumed_options = TrainerOptions {
        ckpt_path: Some(path),
        ..options(dir.path())
    };
    let rest = fit(resumed_options, mode).unwrap();
    assert_eq!(rest.weights, whole.weights, "weights bitwise equal");
    assert_eq!([first.losses, rest.losses].concat(), whole.losses);
    // A checkpoint of two optimizers does not resume a model with one.
    let resumed_options = TrainerOptions {
        ckpt_path: Some(dir.path().join("stop.ckpt")),
        ..options(dir.path())
    };
    let e = fit(resumed_options, Mode::ManualOne)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("2 optimizer(s)") && e.contains("returned 1"),
        "{e}"
    );
}

#[test]
fn what_manual_optimization_cannot_honour_is_refused() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let error = |options: TrainerOptions, mode| format!("{:#}", fit(options, mode).err().unwrap());
    let e = error(options(dir.path()), Mode::AutomaticTwo);
    assert!(e.contains("2 optimizers") && e.contains("manual"), "{e}");
    let e = error(options(dir.path()), Mode::ManualWithoutStep);
    assert!(e.contains("manual_training_step"), "{e}");
    let accumulate = TrainerOptions {
        accumulate_grad_batches: 2,
        ..options(dir.path())
    };
    let e = error(accumulate, Mode::ManualOne);
    assert!(e.contains("--trainer.accumulate_grad_batches"), "{e}");
    assert!(
        e.starts_with("invalid --trainer.accumulate_grad_batches value `2`"),
        "{e}"
    );
    let clip = TrainerOptions {
        gradient_clip_val: Some(1.0),
        ..options(dir.path())
    };
    let e = error(clip, Mode::ManualOne);
    assert!(
        e.contains("--trainer.gradient_clip_val") && e.contains("step_clipped"),
        "{e}"
    );
    let plan = Plan {
        strategy: "ddp_sharded".into(),
        ..Plan::local("cpu", Precision::F32True)
    };
    let sharded = Trainer::<B>::builder(&plan, options(dir.path()))
        .build::<ember::cpu::CpuAccelerator>()
        .unwrap();
    let e = fit_with(sharded, Mode::ManualOne, None).err().unwrap();
    let flag = e
        .downcast_ref::<ember::FlagError>()
        .expect("a flag error: exit 2");
    assert_eq!(flag.flag, "--trainer.strategy");
    let e = format!("{e:#}");
    assert!(e.contains("ddp_sharded") && e.contains("manual"), "{e}");
}

/// A model with neither `training_step` nor manual optimization.
#[derive(burn::module::Module, Debug)]
struct Stepless<B: burn::tensor::backend::Backend> {
    linear: burn::nn::Linear<B>,
}

impl<B: burn::tensor::backend::Backend> ember::LightningModule<B> for Stepless<B> {
    type Batch = ember_acceptance::regression::Batch<B>;
}

impl<B: burn::tensor::backend::AutodiffBackend> ember::TrainingModule<B> for Stepless<B> {
    type Optimizer = ember::optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(
        &self,
        _: &ember::Hparams,
    ) -> anyhow::Result<ember::Optimizers<Self::Optimizer>> {
        Ok(ember::Optimizers::new(
            burn::optim::SgdConfig::new().init(),
            0.1,
        ))
    }
}

#[test]
fn a_model_without_a_training_step_is_an_error_naming_both_ways() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options(dir.path())).unwrap();
    let linear = burn::nn::LinearConfig::new(ember_acceptance::regression::FEATURES, 1);
    let model = Stepless {
        linear: linear.init(&FlexDevice),
    };
    let e = trainer
        .fit(model, &mut ember_acceptance::pair::pair_data())
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("no training_step") && e.contains("manual_training_step"),
        "{e}"
    );
}

/// Sets optimizer 0's rate from the start, as StochasticWeightAveraging does in its epochs.
struct RateSetter;

impl ember::callbacks::Callback for RateSetter {
    fn name(&self) -> &str {
        "RateSetter"
    }

    fn on_fit_start(
        &mut self,
        ctx: &mut ember::callbacks::CallbackContext<'_>,
    ) -> anyhow::Result<()> {
        ctx.state.override_lr(0.5, self.name());
        Ok(())
    }
}

#[test]
fn a_rate_a_callback_sets_is_refused_for_a_second_optimizer_naming_that_callback() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trainer = Trainer::on_device(FlexDevice, options(dir.path()))
        .unwrap()
        .with_callbacks(vec![
            Box::new(RateSetter) as Box<dyn ember::callbacks::Callback>
        ]);
    let e = fit_with(trainer, Mode::ManualTwo(0.1, 0.2), None)
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("a callback (RateSetter) sets the learning rate") && e.contains("optimizer 1"),
        "{e}"
    );
}

#[test]
fn the_learning_rate_finder_refuses_manual_optimization_before_it_sweeps() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let settings = ember::options::LrFind::default();
    let mut trainer = Trainer::on_device(FlexDevice, options(dir.path())).unwrap();
    let model = ember_acceptance::pair::Pair::<B>::new(trainer.device(), Mode::ManualTwo(0.1, 0.2));
    let data = &mut ember_acceptance::pair::pair_data();
    let e = trainer.lr_find(&model, data, &settings).err().unwrap();
    let flag = e
        .downcast_ref::<ember::FlagError>()
        .expect("a flag error: exit 2");
    assert_eq!(flag.flag, "--trainer.lr_find");
    assert!(flag.message.contains("manual optimization"), "{e:#}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}
