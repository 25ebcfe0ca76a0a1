//! Several validation, test and predict loaders, as Lightning runs them
//! (tests/tests_pytorch/trainer/logging_/test_eval_loop_logging.py:
//! `test_multi_dataloaders_add_suffix_properly`, `test_log_works_in_test_callback`): each loader
//! in turn, `limit_*_batches` and the sanity check per loader, what a step logs named
//! `NAME/dataloader_idx_N` unless it asks otherwise, monitors and loggers seeing those names,
//! and predictions as one list per loader.

use std::path::Path;

use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{
    Callback, CallbackContext, EarlyStopping, EarlyStoppingConfig, Mode, ModelCheckpoint,
    ModelCheckpointConfig,
};
use ember::options::Limit;
use ember::{
    DataLoaders, Hparams, LightningModule, LogOptions, Optimizers, Prediction, Reduce, StepLog,
    Trainer, TrainerOptions, TrainingModule, optim,
};
use ember_acceptance::regression::{Batch, Item, ItemBatcher, Regression, items, serial};

type B = Autodiff<Flex>;

/// The regression model, logging per validation batch its loss, the loader it came from and
/// (under one name for every loader) a count of batches.
#[derive(Module, Debug)]
struct Multi<B: Backend> {
    inner: Regression<B>,
}

impl<B: Backend> LightningModule<B> for Multi<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        self.inner.training_step(batch, log)
    }

    fn validation_step(&self, batch: Batch<B>, log: &mut StepLog<B>) {
        let n = batch.indices.len();
        let loss = self.inner.loss(&batch);
        log.log_with("val_loss", loss, LogOptions::default().batch_size(n));
        let loader = log.dataloader_idx() as f64;
        log.log_with("loader", loader, LogOptions::default().reduce(Reduce::Max));
        let across = LogOptions::default()
            .reduce(Reduce::Sum)
            .add_dataloader_idx(false);
        log.log_with("batches", 1.0, across);
    }

    fn predict_step(&self, batch: Batch<B>) -> Prediction {
        Prediction::of(&batch.indices)
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Multi<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _: &Hparams) -> anyhow::Result<Optimizers<Self::Optimizer>> {
        Ok(Optimizers::sgd(0.05))
    }
}

fn loader(n: usize, offset: usize) -> ember::Loader<Item> {
    ember::Loader::new(InMemDataset::new(items(n, offset)), 2)
}

/// Train on 8 items; val, test and predict loaders of 6 and 4 items (3 and 2 batches).
fn two_loaders() -> DataLoaders<Item, ItemBatcher> {
    let (a, b) = (loader(6, 1000), loader(4, 2000));
    DataLoaders::new(ItemBatcher)
        .train(loader(8, 0))
        .val(a.clone())
        .val(b.clone())
        .test(a.clone())
        .test(b.clone())
        .predict(a)
        .predict(b)
}

/// The same loaders alone: loader 0 or loader 1.
fn one_loader(which: usize) -> DataLoaders<Item, ItemBatcher> {
    let l = [loader(6, 1000), loader(4, 2000)][which].clone();
    DataLoaders::new(ItemBatcher)
        .train(loader(8, 0))
        .val(l.clone())
        .test(l.clone())
        .predict(l)
}

fn options(root: &Path) -> TrainerOptions {
    TrainerOptions {
        seed: Some(3),
        max_epochs: Some(2),
        enable_progress_bar: false,
        enable_model_summary: false,
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    }
}

fn trainer(options: TrainerOptions) -> Trainer<B> {
    Trainer::<B>::on_device(FlexDevice, options).unwrap()
}

fn model() -> Multi<B> {
    Multi {
        inner: Regression::new(&FlexDevice),
    }
}

#[test]
fn each_loader_is_validated_and_its_metrics_are_named_after_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        enable_checkpointing: false,
        ..options(dir.path())
    };
    let metrics = trainer(o.clone())
        .validate(model().valid(), &mut two_loaders())
        .unwrap();
    let names: Vec<&str> = metrics.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "batches",
            "loader/dataloader_idx_0",
            "loader/dataloader_idx_1",
            "val_loss/dataloader_idx_0",
            "val_loss/dataloader_idx_1",
        ]
    );
    assert_eq!(metrics["loader/dataloader_idx_0"], 0.0);
    assert_eq!(metrics["loader/dataloader_idx_1"], 1.0);
    assert_eq!(metrics["batches"], 5.0, "3 + 2 batches under one name");
    // Each loader's values are what it gives alone (same initial weights: seeded).
    for which in 0..2 {
        let alone = trainer(o.clone())
            .validate(model().valid(), &mut one_loader(which))
            .unwrap();
        assert_eq!(
            alone.keys().collect::<Vec<_>>(),
            ["batches", "loader", "val_loss"],
            "one loader: names as logged"
        );
        let name = format!("val_loss/dataloader_idx_{which}");
        assert_eq!(metrics[&name].to_bits(), alone["val_loss"].to_bits());
    }
    // limit_val_batches applies to each loader.
    let limited = TrainerOptions {
        limit_val_batches: Limit::Batches(2),
        ..o.clone()
    };
    let metrics = trainer(limited)
        .validate(model().valid(), &mut two_loaders())
        .unwrap();
    assert_eq!(metrics["batches"], 4.0, "2 + 2 batches");
    // test names its metrics the same way.
    let metrics = trainer(o)
        .test(model().valid(), &mut two_loaders())
        .unwrap();
    assert!(
        metrics.contains_key("val_loss/dataloader_idx_1"),
        "{metrics:?}"
    );
}

/// Counts validation batches by loader, and the sanity check's.
#[derive(Clone, Default)]
struct Seen(std::rc::Rc<std::cell::RefCell<Vec<(bool, usize, usize)>>>);

impl Callback for Seen {
    fn name(&self) -> &str {
        "Seen"
    }

    fn on_validation_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let s = &ctx.state;
        (self.0.borrow_mut()).push((s.sanity_checking, s.dataloader_idx, s.num_eval_batches));
        Ok(())
    }
}

#[test]
fn fit_checks_sanity_and_validates_every_loader_and_monitors_see_their_names() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    let checkpoint = ModelCheckpoint::new(ModelCheckpointConfig {
        monitor: Some("val_loss/dataloader_idx_1".into()),
        filename: Some("{epoch}-{val_loss/dataloader_idx_1}".into()),
        ..ModelCheckpointConfig::default()
    });
    let o = TrainerOptions {
        num_sanity_val_steps: Some(1),
        ..options(dir.path())
    };
    let out = trainer(o)
        .with_callback(seen.clone())
        .with_callback(checkpoint)
        .fit(model(), &mut two_loaders())
        .unwrap();
    let calls = seen.0.borrow().clone();
    let sanity: Vec<_> = calls.iter().filter(|c| c.0).collect();
    assert_eq!(sanity, [&(true, 0, 1), &(true, 1, 1)], "one batch of each");
    let epoch: Vec<_> = calls.iter().filter(|c| !c.0).take(5).collect();
    assert_eq!(
        epoch,
        [
            &(false, 0, 3),
            &(false, 0, 3),
            &(false, 0, 3),
            &(false, 1, 2),
            &(false, 1, 2)
        ]
    );
    assert!(out.metrics.contains_key("val_loss/dataloader_idx_0"));
    // The checkpoint is named after the monitored value, in its directory.
    let best = out.best_model_path.expect("a best checkpoint");
    let name = best.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("epoch=1-val_loss_dataloader_idx_1="),
        "{name}"
    );
    assert!(best.exists() && best.parent().unwrap().ends_with("checkpoints"));
    // The CSV logger's columns are the metrics' names.
    let log_dir = out.log_dir.unwrap();
    let csv = std::fs::read_to_string(log_dir.join("metrics.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.contains("val_loss/dataloader_idx_0")
            && header.contains("val_loss/dataloader_idx_1"),
        "{header}"
    );
}

#[test]
fn a_monitor_without_the_loader_suffix_is_an_error_listing_the_names() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let stopping = EarlyStopping::new(EarlyStoppingConfig::new("val_loss", Mode::Min)).unwrap();
    let e = trainer(options(dir.path()))
        .with_callback(stopping)
        .fit(model(), &mut two_loaders())
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.contains("`val_loss`") && e.contains("val_loss/dataloader_idx_0"),
        "{e}"
    );
}

#[test]
fn predictions_come_as_one_list_per_loader() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = options(dir.path());
    let each: Vec<Vec<Vec<usize>>> = trainer(o.clone())
        .predict_each(model().valid(), &mut two_loaders())
        .unwrap();
    assert_eq!(
        each,
        [
            vec![vec![0, 1], vec![2, 3], vec![4, 5]],
            vec![vec![0, 1], vec![2, 3]]
        ]
    );
    let limited = TrainerOptions {
        limit_predict_batches: Limit::Batches(1),
        ..o.clone()
    };
    let each: Vec<Vec<Vec<usize>>> = trainer(limited)
        .predict_each(model().valid(), &mut two_loaders())
        .unwrap();
    assert_eq!(each, [vec![vec![0, 1]], vec![vec![0, 1]]]);
    let e = trainer(o.clone())
        .predict::<_, _, Vec<usize>>(model().valid(), &mut two_loaders())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("2 predict loaders") && e.contains("predict_each"),
        "{e}"
    );
    let one: Vec<Vec<usize>> = trainer(o)
        .predict(model().valid(), &mut one_loader(1))
        .unwrap();
    assert_eq!(one, [vec![0, 1], vec![2, 3]]);
}

/// A data module that makes its predict loaders in `setup`, as one that loads files does.
#[derive(Default)]
struct MadeInSetup(Vec<ember::Loader<Item>>);

impl ember::DataModule for MadeInSetup {
    type Item = Item;
    type Batcher = ItemBatcher;

    fn setup(&mut self, _: ember::Stage) -> anyhow::Result<()> {
        self.0 = vec![loader(6, 1000), loader(4, 2000)];
        Ok(())
    }

    fn train_loader(&self) -> anyhow::Result<Option<ember::Loader<Item>>> {
        Ok(None)
    }

    fn predict_loaders(&self) -> anyhow::Result<Vec<ember::Loader<Item>>> {
        Ok(self.0.clone())
    }
}

#[test]
fn predict_refuses_several_loaders_that_setup_makes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let e = trainer(options(dir.path()))
        .predict::<_, _, Vec<usize>>(model().valid(), &mut MadeInSetup::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("2 predict loaders"), "{e}");
}

#[test]
fn the_docs_snippets_on_several_loaders_are_taken_from_this_file() {
    ember_acceptance::docs::assert_snippets_in(
        include_str!("../../docs/trainer.md"),
        "## Several validation, test and predict loaders",
        include_str!("multiple_loaders.rs"),
        2,
    );
}
