//! The Trainer's loops, flags, callbacks and loggers on the cpu backend, with the small linear
//! regression of `ember_acceptance::regression` (its items carry their index, so tests can see
//! which batches ran).

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use burn::module::AutodiffModule;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{
    Callback, CallbackContext, EarlyStopping, EarlyStoppingConfig, Mode, ModelCheckpoint,
    ModelCheckpointConfig,
};
use ember::options::Limit;
use ember::{DataModule, FitOutcome, Loader, Plan, Precision, Trainer, TrainerOptions};
use ember_acceptance::PlannedTpu;
use ember_acceptance::regression::{Data, Item, ItemBatcher, Regression, data, serial};
use serde_json::Value;

type B = Autodiff<Flex>;

/// Options for a quiet test run writing under `root`.
fn options(root: &Path) -> TrainerOptions {
    TrainerOptions {
        seed: Some(7),
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        max_epochs: Some(2),
        ..TrainerOptions::default()
    }
}

fn fit(
    options: TrainerOptions,
    data: &mut Data,
    callbacks: Vec<Box<dyn Callback>>,
) -> anyhow::Result<FitOutcome<Regression<B>>> {
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?.with_callbacks(callbacks);
    let model = Regression::new(trainer.device());
    trainer.fit(model, data)
}

/// Records hook calls as `(hook, sanity_checking, epoch, global_step)`.
#[derive(Clone, Default)]
struct Recorder(Rc<RefCell<Vec<Call>>>);

/// One hook call: `(hook, sanity_checking, epoch, global_step)`.
type Call = (&'static str, bool, u64, u64);

impl Recorder {
    fn push(&self, hook: &'static str, ctx: &CallbackContext<'_>) {
        self.0.borrow_mut().push((
            hook,
            ctx.state.sanity_checking,
            ctx.state.epoch,
            ctx.state.global_step,
        ));
    }
    fn count(&self, hook: &str, sanity: bool) -> usize {
        self.0
            .borrow()
            .iter()
            .filter(|(h, s, _, _)| *h == hook && *s == sanity)
            .count()
    }
    fn hooks(&self) -> Vec<&'static str> {
        self.0.borrow().iter().map(|(h, ..)| *h).collect()
    }
}

macro_rules! record {
    ($($hook:ident),*) => {
        impl Callback for Recorder {
            fn name(&self) -> &str { "Recorder" }
            $(fn $hook(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
                self.push(stringify!($hook), ctx);
                Ok(())
            })*
            fn on_exception(&mut self, ctx: &mut CallbackContext<'_>, _e: &anyhow::Error) {
                self.push("on_exception", ctx);
            }
        }
    };
}
record!(
    setup,
    on_fit_start,
    on_train_epoch_start,
    on_train_batch_end,
    on_train_epoch_end,
    on_validation_start,
    on_validation_batch_end,
    on_validation_end,
    on_fit_end,
    teardown
);

fn recorded(options: TrainerOptions, data: &mut Data) -> (FitOutcome<Regression<B>>, Recorder) {
    let recorder = Recorder::default();
    let out = fit(options, data, vec![Box::new(recorder.clone())]).unwrap();
    (out, recorder)
}

fn weights(model: &Regression<B>) -> Vec<f32> {
    let mut w = model
        .linear
        .weight
        .val()
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    if let Some(b) = &model.linear.bias {
        w.extend(b.val().into_data().to_vec::<f32>().unwrap());
    }
    w
}

#[test]
fn max_epochs_and_max_steps_bound_the_loop() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = fit(options(dir.path()), &mut data(100, 20, 10), vec![]).unwrap();
    assert_eq!((out.epochs, out.global_step), (2, 20));
    let o = TrainerOptions {
        max_epochs: None,
        max_steps: Some(15),
        ..options(dir.path())
    };
    let out = fit(o, &mut data(100, 20, 10), vec![]).unwrap();
    assert_eq!((out.epochs, out.global_step), (2, 15));
}

#[test]
fn limit_batches_count_or_fraction() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        limit_train_batches: Limit::Fraction(0.5),
        limit_val_batches: Limit::Batches(1),
        ..options(dir.path())
    };
    let (out, rec) = recorded(o, &mut data(100, 30, 10));
    assert_eq!(out.global_step, 10);
    assert_eq!(rec.count("on_validation_batch_end", false), 2);
    let o = TrainerOptions {
        limit_train_batches: Limit::Batches(3),
        ..options(dir.path())
    };
    let (out, rec) = recorded(o, &mut data(100, 30, 10));
    assert_eq!(out.global_step, 6);
    assert_eq!(rec.count("on_validation_batch_end", false), 6);
}

#[test]
fn validation_follows_interval_and_epoch_frequency() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let base = TrainerOptions {
        max_epochs: Some(4),
        num_sanity_val_steps: Some(0),
        ..options(dir.path())
    };
    let runs = [
        (
            TrainerOptions {
                val_check_interval: Limit::Fraction(0.5),
                ..base.clone()
            },
            8,
        ),
        (
            TrainerOptions {
                check_val_every_n_epoch: Some(2),
                ..base.clone()
            },
            2,
        ),
        (
            TrainerOptions {
                val_check_interval: Limit::Batches(5),
                ..base.clone()
            },
            8,
        ),
        (
            TrainerOptions {
                val_check_interval: Limit::Batches(15),
                check_val_every_n_epoch: None,
                ..base.clone()
            },
            2,
        ),
    ];
    for (o, validations) in runs {
        let (_, rec) = recorded(o.clone(), &mut data(100, 20, 10));
        assert_eq!(rec.count("on_validation_end", false), validations, "{o:?}");
    }
    let too_far = TrainerOptions {
        val_check_interval: Limit::Batches(11),
        ..base
    };
    let e = fit(too_far, &mut data(100, 20, 10), vec![]).unwrap_err();
    assert!(
        e.to_string().contains("--trainer.val_check_interval"),
        "{e}"
    );
}

#[test]
fn sanity_check_runs_the_asked_batches_and_is_not_logged() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    for (steps, expected) in [(Some(2), 2), (Some(0), 0), (None, 2)] {
        let o = TrainerOptions {
            num_sanity_val_steps: steps,
            ..options(dir.path())
        };
        let (_, rec) = recorded(o, &mut data(40, 20, 10));
        assert_eq!(
            rec.count("on_validation_batch_end", true),
            expected,
            "{steps:?}"
        );
    }
}

#[test]
fn fast_dev_run_runs_n_batches_once_and_writes_nothing() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        fast_dev_run: 2,
        max_epochs: Some(5),
        ..options(dir.path())
    };
    let (out, rec) = recorded(o, &mut data(100, 30, 10));
    assert_eq!((out.epochs, out.global_step), (1, 2));
    assert_eq!(rec.count("on_validation_batch_end", true), 0);
    assert_eq!(rec.count("on_validation_batch_end", false), 2);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "fast_dev_run wrote files"
    );
    assert!(out.best_model_path.is_none());
}

#[test]
fn overfit_batches_trains_on_the_first_batches_unshuffled() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        overfit_batches: Limit::Batches(2),
        ..options(dir.path())
    };
    let (out, rec) = recorded(o, &mut data(100, 30, 10));
    assert_eq!(out.global_step, 4);
    assert_eq!(out.metrics["min_index"], 0.0);
    assert_eq!(out.metrics["max_index"], 19.0);
    assert_eq!(rec.count("on_validation_batch_end", false), 4);
    let shuffled = fit(options(dir.path()), &mut data(100, 30, 10), vec![]).unwrap();
    assert_eq!(shuffled.metrics["max_index"], 99.0);
}

#[test]
fn a_seed_makes_fits_repeat_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let a = fit(options(dir.path()), &mut data(100, 20, 10), vec![]).unwrap();
    let b = fit(options(dir.path()), &mut data(100, 20, 10), vec![]).unwrap();
    assert_eq!(weights(&a.model), weights(&b.model));
    let o = TrainerOptions {
        seed: Some(8),
        ..options(dir.path())
    };
    let c = fit(o, &mut data(100, 20, 10), vec![]).unwrap();
    assert_ne!(weights(&a.model), weights(&c.model));
}

#[test]
fn deterministic_is_refused_with_a_reason_where_it_cannot_be_honoured() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = options(dir.path());
    let deterministic = |accelerator| Plan {
        deterministic: true,
        ..Plan::local(accelerator, Precision::F32True)
    };
    let cpu = Trainer::<B>::new::<ember::cpu::CpuAccelerator>(&deterministic("cpu"), o.clone());
    match std::env::var("RAYON_NUM_THREADS").as_deref() {
        Ok("1") => assert!(cpu.is_ok()),
        _ => {
            let e = cpu.err().unwrap().to_string();
            assert!(
                e.contains("--trainer.deterministic") && e.contains("RAYON_NUM_THREADS=1"),
                "{e}"
            );
        }
    }
    let e = Trainer::<B>::new::<PlannedTpu>(&deterministic("tpu"), o)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("--trainer.deterministic") && e.contains("tpu"),
        "{e}"
    );
}

#[test]
fn accumulating_k_batches_equals_one_batch_k_times_larger() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let unshuffled = |o: TrainerOptions, batch: usize| {
        let mut d = data(32, 0, batch);
        let mut trainer = Trainer::<B>::on_device(FlexDevice, o).unwrap();
        let model = Regression::new(trainer.device());
        let mut d2 = Unshuffled(&mut d);
        trainer.fit(model, &mut d2).unwrap()
    };
    let base = TrainerOptions {
        max_epochs: Some(1),
        ..options(dir.path())
    };
    let small = unshuffled(
        TrainerOptions {
            accumulate_grad_batches: 4,
            ..base.clone()
        },
        8,
    );
    let large = unshuffled(base, 32);
    assert_eq!((small.global_step, large.global_step), (1, 1));
    for (a, b) in weights(&small.model).iter().zip(weights(&large.model)) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }
}

/// The test data module in item order.
struct Unshuffled<'a>(&'a mut Data);

impl DataModule for Unshuffled<'_> {
    type Item = Item;
    type Batcher = ItemBatcher;
    fn train_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        Ok(self.0.train_loader()?.map(|mut l| {
            l.shuffle = false;
            l
        }))
    }
}

/// Clipping itself is unit-tested in crates/core/src/trainer/grads.rs.
#[test]
fn clipping_bounds_the_step() {
    let _serial = serial();
    // Through the step path: with SGD at lr 1, one step moves the weights by the clipped
    // gradient, so its norm is the clip value.
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        max_steps: Some(1),
        gradient_clip_val: Some(0.25),
        ..options(dir.path())
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, o).unwrap();
    let mut model = Regression::new(trainer.device());
    model.lr = 1.0;
    let before = weights(&model);
    let after = weights(&trainer.fit(model, &mut data(100, 0, 10)).unwrap().model);
    let moved: f32 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f32>()
        .sqrt();
    assert!((moved - 0.25).abs() < 1e-4, "moved {moved}");
}

/// Replaces `val_loss` with a scripted value per validation, to drive monitors.
struct Scripted(Vec<f64>, usize);

impl Callback for Scripted {
    fn name(&self) -> &str {
        "Scripted"
    }
    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if !ctx.state.sanity_checking {
            let v = self.0[self.1.min(self.0.len() - 1)];
            self.1 += 1;
            ctx.state.callback_metrics.insert("val_loss".into(), v);
        }
        Ok(())
    }
}

#[test]
fn early_stopping_stops_after_patience_but_not_before_min_epochs() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stopper = || {
        Box::new(
            EarlyStopping::new(EarlyStoppingConfig {
                patience: 2,
                ..EarlyStoppingConfig::new("val_loss", Mode::Min)
            })
            .unwrap(),
        ) as Box<dyn Callback>
    };
    let script = || Box::new(Scripted(vec![1.0, 0.5, 0.6, 0.7, 0.4], 0)) as Box<dyn Callback>;
    let o = TrainerOptions {
        max_epochs: Some(10),
        ..options(dir.path())
    };
    let out = fit(o.clone(), &mut data(40, 20, 10), vec![script(), stopper()]).unwrap();
    assert!(out.stopped_early);
    assert_eq!(
        out.epochs, 4,
        "best at epoch 2, then two checks without improvement"
    );
    let o = TrainerOptions { min_epochs: 6, ..o };
    let out = fit(o, &mut data(40, 20, 10), vec![script(), stopper()]).unwrap();
    assert_eq!(out.epochs, 6);
    let missing =
        Box::new(EarlyStopping::new(EarlyStoppingConfig::new("val_acc", Mode::Max)).unwrap());
    let e = fit(options(dir.path()), &mut data(40, 20, 10), vec![missing]).unwrap_err();
    assert!(
        format!("{e:#}").contains("val_acc") && format!("{e:#}").contains("val_loss"),
        "{e:#}"
    );
}

#[test]
fn model_checkpoint_keeps_the_top_k_and_last() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let ckpt_dir = dir.path().join("ckpts");
    let checkpoint = ModelCheckpoint::new(ModelCheckpointConfig {
        dirpath: Some(ckpt_dir.clone()),
        monitor: Some("val_loss".into()),
        save_top_k: 2,
        save_last: true,
        ..ModelCheckpointConfig::default()
    });
    let o = TrainerOptions {
        max_epochs: Some(5),
        ..options(dir.path())
    };
    let script = Scripted(vec![0.5, 0.2, 0.9, 0.1, 0.3], 0);
    let out = fit(
        o,
        &mut data(40, 20, 10),
        vec![Box::new(script), Box::new(checkpoint)],
    )
    .unwrap();
    let mut files: Vec<String> = std::fs::read_dir(&ckpt_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["epoch=1-step=8.ckpt", "epoch=3-step=16.ckpt", "last.ckpt"]
    );
    assert_eq!(
        out.best_model_path,
        Some(ckpt_dir.join("epoch=3-step=16.ckpt"))
    );

    // The best checkpoint holds that epoch's weights: validating from it reproduces them.
    let o = TrainerOptions {
        ckpt_path: Some(ckpt_dir.join("last.ckpt")),
        ..options(dir.path())
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, o).unwrap();
    let fresh = Regression::<Flex>::new(trainer.device());
    let from_last = trainer.validate(fresh, &mut data(40, 20, 10)).unwrap();
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options(dir.path())).unwrap();
    let trained = trainer
        .validate(out.model.valid(), &mut data(40, 20, 10))
        .unwrap();
    assert_eq!(from_last["val_loss"], trained["val_loss"]);
}

#[test]
fn a_default_checkpoint_is_written_unless_disabled() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = fit(options(dir.path()), &mut data(40, 20, 10), vec![]).unwrap();
    let path = out.best_model_path.unwrap();
    assert_eq!(
        path,
        dir.path()
            .join("lightning_logs/version_0/checkpoints/epoch=1-step=8.ckpt")
    );
    assert!(path.is_file());
    let o = TrainerOptions {
        enable_checkpointing: false,
        ..options(dir.path())
    };
    let out = fit(o, &mut data(40, 20, 10), vec![]).unwrap();
    assert!(out.best_model_path.is_none());
    assert!(
        !dir.path()
            .join("lightning_logs/version_1/checkpoints")
            .exists()
    );
}

#[test]
fn csv_logger_writes_metrics_and_hparams_in_a_new_version() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        log_every_n_steps: 2,
        callbacks: vec![ember::options::CallbackSpec {
            class_path: "LearningRateMonitor".into(),
            init_args: serde_json::json!({}),
        }],
        ..options(dir.path())
    };
    for version in 0..2 {
        let mut trainer = Trainer::<B>::new::<ember::cpu::CpuAccelerator>(
            &Plan::local("cpu", Precision::F32True),
            o.clone(),
        )
        .unwrap()
        .with_callback(ember::callbacks::DeviceStatsMonitor::default())
        .with_hparams(serde_json::json!({"model": {"lr": 0.05}}));
        let model = Regression::new(trainer.device());
        let out = trainer.fit(model, &mut data(40, 20, 10)).unwrap();
        let log_dir = dir.path().join(format!("lightning_logs/version_{version}"));
        assert_eq!(out.log_dir.as_deref(), Some(log_dir.as_path()));
        let csv = std::fs::read_to_string(log_dir.join("metrics.csv")).unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        for column in [
            "step",
            "epoch",
            "train_loss",
            "val_loss",
            "lr",
            "device_stats/rss_bytes",
        ] {
            assert!(header.contains(&column), "{column} missing from {header:?}");
        }
        // 4 batches per epoch, 2 epochs, every 2 steps: train_loss after optimizer steps 2, 4,
        // 6, 8, written at the steps before them as Lightning does (its `_batches_that_stepped`
        // when `update_train_step_metrics` runs, loops/training_epoch_loop.py): 1, 3, 5, 7.
        let col = header.iter().position(|c| *c == "train_loss").unwrap();
        let steps: Vec<&str> = csv
            .lines()
            .skip(1)
            .filter(|l| !l.split(',').nth(col).unwrap().is_empty())
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(steps, ["1", "3", "5", "7"]);
        let hparams: Value =
            serde_yaml::from_str(&std::fs::read_to_string(log_dir.join("hparams.yaml")).unwrap())
                .unwrap();
        assert_eq!(hparams["model"]["lr"], 0.05);
    }
}

#[test]
fn hooks_run_in_lightning_order() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        max_epochs: Some(1),
        num_sanity_val_steps: Some(1),
        ..options(dir.path())
    };
    let (_, rec) = recorded(o, &mut data(20, 10, 10));
    assert_eq!(
        rec.hooks(),
        [
            "setup",
            "on_fit_start",
            "on_validation_start",
            "on_validation_batch_end",
            "on_validation_end",
            "on_train_epoch_start",
            "on_train_batch_end",
            "on_train_batch_end",
            "on_validation_start",
            "on_validation_batch_end",
            "on_validation_end",
            "on_train_epoch_end",
            "on_fit_end",
            "teardown",
        ]
    );
}

/// Fails on the third training batch.
struct FailsOnBatch3;

impl Callback for FailsOnBatch3 {
    fn name(&self) -> &str {
        "FailsOnBatch3"
    }
    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        anyhow::ensure!(ctx.state.global_step < 3, "injected failure");
        Ok(())
    }
}

#[test]
fn a_failure_reaches_on_exception_and_teardown_and_the_caller() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::default();
    let e = fit(
        options(dir.path()),
        &mut data(100, 10, 10),
        vec![Box::new(rec.clone()), Box::new(FailsOnBatch3)],
    )
    .unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.contains("FailsOnBatch3") && text.contains("injected failure"),
        "{text}"
    );
    assert_eq!(
        rec.hooks().iter().rev().take(2).collect::<Vec<_>>(),
        [&"teardown", &"on_exception"]
    );
}

#[test]
fn config_callbacks_build_and_unknown_ones_are_refused() {
    let _serial = serial();
    let mut o = TrainerOptions::default();
    o.set(
        "callbacks",
        &serde_json::json!([{"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss", "patience": 1}}, "DeviceStatsMonitor"]),
    )
    .unwrap();
    assert!(Trainer::<B>::on_device(FlexDevice, o.clone()).is_ok());
    // Any name reads as a callback (an application may register it); building refuses it.
    o.set("callbacks", &serde_json::json!(["Swa"])).unwrap();
    let e = format!(
        "{:#}",
        Trainer::<B>::on_device(FlexDevice, o)
            .err()
            .expect("Swa is refused")
    );
    assert!(
        e.contains("--trainer.callbacks") && e.contains("Swa"),
        "{e}"
    );
}

/// TensorBoard's own reader, run on `dir`: every scalar as `tag step value` lines.
const READ_EVENTS: &str = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
for tag in acc.Tags()["scalars"]:
    for e in acc.Scalars(tag):
        print(tag, e.step, repr(e.value))
"#;

#[test]
fn tensorboard_event_files_are_valid_and_read_back_by_tensorboard() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.log_every_n_steps = 2;
    o.set("logger", &serde_json::json!(["csv", "tensorboard"]))
        .unwrap();
    let out = fit(o, &mut data(40, 20, 10), vec![]).unwrap();
    let log_dir = out.log_dir.unwrap();
    let events: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");

    // Every TFRecord's length and data CRCs check out: CRC-32C, rotated right by 15 bits plus
    // TensorFlow's mask constant.
    let castagnoli = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let masked_crc = |b: &[u8]| {
        (castagnoli.checksum(b))
            .rotate_right(15)
            .wrapping_add(0xa282_ead8)
    };
    let bytes = std::fs::read(&events[0]).unwrap();
    let (mut at, mut records) = (0, 0);
    while at < bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let crc = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap());
        assert_eq!(crc(&bytes[at + 8..at + 12]), masked_crc(len_bytes));
        let data = &bytes[at + 12..at + 12 + len];
        assert_eq!(crc(&bytes[at + 12 + len..at + 16 + len]), masked_crc(data));
        at += 16 + len;
        records += 1;
    }
    assert!(records > 5, "{records} records");

    let read = std::process::Command::new("python3")
        .args(["-c", READ_EVENTS])
        .arg(&log_dir)
        .output()
        .expect("python3 runs");
    assert!(
        read.status.success(),
        "TensorBoard could not read the events (is the tensorboard package installed? scripts/setup.sh installs it): {}",
        String::from_utf8_lossy(&read.stderr)
    );
    let text = String::from_utf8_lossy(&read.stdout);
    let loss_steps: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("train_loss "))
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    // Lightning's step labels (see csv_logger_writes_metrics_and_hparams_in_a_new_version).
    assert_eq!(loss_steps, ["1", "3", "5", "7"], "{text}");
    let val_loss: f64 = text
        .lines()
        .filter(|l| l.starts_with("val_loss 7 "))
        .map(|l| l.split(' ').nth(2).unwrap().parse().unwrap())
        .next()
        .unwrap_or_else(|| panic!("no val_loss at step 7 in {text}"));
    assert!((val_loss - out.metrics["val_loss"]).abs() < 1e-6 * out.metrics["val_loss"].max(1.0));
}

#[test]
fn a_one_process_trainer_offers_the_identity_collective() {
    let _serial = serial();
    let trainer = Trainer::<B>::on_device(FlexDevice, TrainerOptions::default()).unwrap();
    let collective = trainer.collective();
    assert_eq!((collective.rank(), collective.world_size()), (0, 1));
    collective.barrier().unwrap();
    assert_eq!(collective.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    let mut values = [1.5f32, -2.0];
    collective
        .all_reduce_f32(&mut values, ember::plugins::ReduceOp::Sum)
        .unwrap();
    assert_eq!(values, [1.5, -2.0]);
}
