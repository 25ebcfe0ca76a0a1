//! Fine-tuning, as Lightning's tests/tests_pytorch/callbacks/test_finetuning_callback.py
//! checks it: `freeze`/`unfreeze` by module path with `train_bn` (`test_freeze_unfreeze_function`),
//! BackboneFinetuning freezing the backbone until an epoch and then training it at a rising
//! share of the rate (`test_finetuning_callback`), a fit with it resumed exactly
//! (`test_callbacks_restore_backbone`).

use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{BackboneFinetuning, BackboneFinetuningConfig, Callback, CallbackContext};
use ember::freezing::{freeze, trainable_under, unfreeze};
use ember::{Plan, Precision, Trainer, TrainerOptions};
use ember_acceptance::regression::{Batch, ItemBatcher, items, serial};
use ember_acceptance::resume::{Losses, RecordLosses, float_bytes};
use ember_acceptance::tuned::{LR, Tuned, data, options};

type B = Autodiff<Flex>;

fn finetuning(unfreeze_at: u64, ratio: f64, multiplier: f64) -> BackboneFinetuning {
    BackboneFinetuning::new(BackboneFinetuningConfig {
        unfreeze_backbone_at_epoch: unfreeze_at,
        backbone_initial_ratio_lr: ratio,
        multiplier,
        train_bn: false,
        ..Default::default()
    })
    .unwrap()
}

/// Builds a Trainer (seeding the backend), then the model: the same weights every time.
fn fit(
    options: TrainerOptions,
    callbacks: Vec<Box<dyn Callback>>,
) -> anyhow::Result<(Tuned<B>, Tuned<B>)> {
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?.with_callbacks(callbacks);
    let model = Tuned::<B>::new(trainer.device());
    let out = trainer.fit(model.clone(), &mut data(4))?;
    Ok((model, out.model))
}

#[test]
fn freeze_and_unfreeze_follow_module_paths_and_keep_batch_norm_with_train_bn() {
    let _serial = serial();
    let model = Tuned::<B>::new(&FlexDevice);
    let (norm, _) = trainable_under(&model, "backbone.norm");
    let (all, none) = trainable_under(&model, "");
    // The norm's running mean and variance (8) take no gradient.
    assert_eq!((all, none), (20 + norm + 5, 8));
    let (frozen, _) = freeze(model.clone(), "backbone", true).unwrap();
    // Linear 4x4 + 4 = 20 frozen; the batch norm stays trainable.
    assert_eq!(trainable_under(&frozen, "backbone.linear"), (0, 20));
    assert_eq!(trainable_under(&frozen, "backbone.norm"), (norm, 8));
    assert_eq!(trainable_under(&frozen, "head"), (5, 0));
    let (frozen, which) = freeze(model.clone(), "backbone", false).unwrap();
    let thawed = unfreeze(frozen.clone(), &which);
    assert_eq!(trainable_under(&frozen, "backbone"), (0, 20 + norm + 8));
    assert_eq!(
        which.len(),
        4,
        "weights and biases of the linear layer and the norm"
    );
    // Unfreezing wakes what froze, not the running statistics.
    assert_eq!(trainable_under(&thawed, ""), (all, none));
    let (one, _) = freeze(model.clone(), "backbone.linear", false).unwrap();
    assert_eq!(trainable_under(&one, ""), (all - 20, none + 20));
    // `backbone.lin` names no module: a prefix matches whole path parts only.
    let e = freeze(model, "backbone.lin", false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("`backbone.lin`") && e.contains("backbone, head"),
        "{e}"
    );
}

/// At an epoch's start: the epoch, the backbone's share of the rate, whether it is frozen.
type Share = (u64, Option<f64>, bool);

/// Records at each epoch's start (after BackboneFinetuning) the backbone's share of the rate.
#[derive(Clone, Default)]
struct Shares(std::rc::Rc<std::cell::RefCell<Vec<Share>>>);

impl Callback for Shares {
    fn name(&self) -> &str {
        "Shares"
    }

    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let s = &ctx.state;
        let share = s.lr_factors.get("backbone").copied();
        let frozen = s.frozen_modules.contains_key("backbone");
        self.0.borrow_mut().push((s.epoch, share, frozen));
        Ok(())
    }
}

#[test]
fn backbone_finetuning_freezes_the_backbone_then_trains_it_at_a_rising_share() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let shares = Shares::default();
    let callbacks: Vec<Box<dyn Callback>> =
        vec![Box::new(finetuning(2, 0.1, 1.5)), Box::new(shares.clone())];
    let (initial, trained) = fit(options(dir.path(), 5), callbacks).unwrap();
    let seen = shares.0.borrow().clone();
    let expected = [
        (0, None, true),
        (1, None, true),
        (2, Some(0.1), false),
        (3, Some(0.1 * 1.5), false),
        (4, Some(0.1 * 1.5 * 1.5), false),
    ];
    assert_eq!(seen, expected);
    assert_ne!(
        float_bytes(&initial.backbone),
        float_bytes(&trained.backbone)
    );
    // Two epochs: the backbone (its batch norm too: train_bn=false) has not moved; the head has.
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(finetuning(2, 0.1, 1.5))];
    let (initial, trained) = fit(options(dir.path(), 2), callbacks).unwrap();
    let weights = |m: &Tuned<B>| {
        let b = &m.backbone;
        [
            float_bytes(&b.linear),
            float_bytes(&b.norm.gamma.val()),
            float_bytes(&b.norm.beta.val()),
        ]
    };
    assert_eq!(weights(&initial), weights(&trained));
    assert_ne!(float_bytes(&initial.head), float_bytes(&trained.head));
}

#[test]
fn the_backbone_steps_at_its_share_of_the_rate() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        max_steps: Some(1),
        ..options(dir.path(), 1)
    };
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(finetuning(0, 0.25, 1.0))];
    let mut trainer = Trainer::<B>::on_device(FlexDevice, o)
        .unwrap()
        .with_callbacks(callbacks);
    let model = Tuned::<B>::new(trainer.device());
    // One batch of all 16 items: the step's gradient is this loss's.
    let out = trainer.fit(model.clone(), &mut data(16)).unwrap();
    let batch: Batch<B> =
        burn::data::dataloader::batcher::Batcher::batch(&ItemBatcher, items(16, 0), &FlexDevice);
    let mut grads = GradientsParams::from_grads(model.loss(&batch).backward(), &model);
    let mut step = |param: &burn::module::Param<Tensor<B, 2>>, lr: f64| -> Vec<f32> {
        let g = grads.remove::<Flex, 2>(param.id).unwrap();
        let w = param.val().inner() - g.mul_scalar(lr);
        w.into_data().to_vec().unwrap()
    };
    let expected_backbone = step(&model.backbone.linear.weight, LR * 0.25);
    let expected_head = step(&model.head.weight, LR);
    let got = |param: &burn::module::Param<Tensor<B, 2>>| -> Vec<f32> {
        param.val().into_data().to_vec().unwrap()
    };
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-6);
    let backbone = got(&out.model.backbone.linear.weight);
    assert!(
        close(&backbone, &expected_backbone),
        "{backbone:?} vs {expected_backbone:?}"
    );
    let head = got(&out.model.head.weight);
    assert!(
        close(&head, &expected_head),
        "{head:?} vs {expected_head:?}"
    );
    let whole_rate = step_whole(&model, &batch);
    assert!(
        !close(&backbone, &whole_rate),
        "the share made a difference"
    );
}

/// The backbone's weight after one SGD step at the whole rate.
fn step_whole(model: &Tuned<B>, batch: &Batch<B>) -> Vec<f32> {
    let mut grads = GradientsParams::from_grads(model.loss(batch).backward(), model);
    let param = &model.backbone.linear.weight;
    let g = grads.remove::<Flex, 2>(param.id).unwrap();
    let w = param.val().inner() - g.mul_scalar(LR);
    w.into_data().to_vec().unwrap()
}

#[test]
fn a_fit_with_backbone_finetuning_resumes_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let run = |stop_at: Option<u64>, resume: bool| {
        let seen = Losses::default();
        let path = dir.path().join("stop.ckpt");
        let o = TrainerOptions {
            ckpt_path: resume.then(|| path.clone()),
            ..options(dir.path(), 5)
        };
        let record = RecordLosses {
            seen: seen.clone(),
            stop_at: stop_at.map(|s| (s, path)),
        };
        let callbacks: Vec<Box<dyn Callback>> =
            vec![Box::new(finetuning(1, 0.2, 2.0)), Box::new(record)];
        let (_, trained) = fit(o, callbacks).unwrap();
        (float_bytes(&trained), seen.borrow().clone())
    };
    let (whole, whole_losses) = run(None, false);
    // 4 batches per epoch: step 6 is mid-way through epoch 1, the first unfrozen one.
    let (_, first) = run(Some(6), false);
    let (resumed, rest) = run(None, true);
    assert_eq!(resumed, whole, "weights bitwise equal");
    assert_eq!(
        [first, rest].concat(),
        whole_losses,
        "every loss bitwise equal"
    );
}

#[test]
fn a_backbone_path_the_model_lacks_is_a_flag_error_naming_its_modules() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let callback = BackboneFinetuning::new(BackboneFinetuningConfig {
        backbone: "encoder".into(),
        ..Default::default()
    })
    .unwrap();
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options(dir.path(), 1))
        .unwrap()
        .with_callback(callback);
    let model = Tuned::<B>::new(trainer.device());
    let e = trainer.fit(model, &mut data(4)).err().unwrap();
    let flag = e
        .downcast_ref::<ember::FlagError>()
        .expect("a flag error: exit 2");
    assert_eq!(
        (flag.flag.as_str(), flag.value.as_str()),
        ("--trainer.callbacks", "encoder")
    );
    assert!(flag.message.contains("backbone, head"), "{flag}");
}

#[test]
fn ddp_sharded_refuses_freezing_during_fit() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        strategy: "ddp_sharded".into(),
        ..Plan::local("cpu", Precision::F32True)
    };
    let mut trainer = Trainer::<B>::builder(&plan, options(dir.path(), 2))
        .build::<ember::cpu::CpuAccelerator>()
        .unwrap()
        .with_callback(finetuning(1, 0.1, 1.5));
    let model = Tuned::<B>::new(trainer.device());
    let e = trainer.fit(model, &mut data(4)).err().unwrap();
    let flag = e
        .downcast_ref::<ember::FlagError>()
        .expect("a flag error: exit 2");
    assert_eq!(flag.flag, "--trainer.strategy");
    let e = format!("{e:#}");
    assert!(e.contains("ddp_sharded") && e.contains("use ddp"), "{e}");
}

#[test]
fn the_docs_snippet_on_fine_tuning_is_taken_from_this_file() {
    ember_acceptance::docs::assert_snippets_in(
        include_str!("../../docs/trainer.md"),
        "### Fine-tuning",
        include_str!("finetuning.rs"),
        1,
    );
}
