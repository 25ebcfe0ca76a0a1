//! A first model as a new user writes it: only `training_step` and `configure_optimizers`,
//! hyperparameters read from the run rather than stored on the module, loaders without a
//! data module of its own. Missing steps are named at run time, not refused at compile time.

use burn::data::dataset::InMemDataset;
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::MissingStep;
use ember::cpu::CpuAccelerator;
use ember::optim;
use ember::prelude::*;
use ember::{Plan, Precision, TrainerOptions};
use ember_acceptance::regression::{Batch, FEATURES, Item, ItemBatcher, items, serial};
use serde::Deserialize;
use serde_json::json;

type B = Autodiff<Flex>;

/// A linear model with a training step and nothing else.
#[derive(Module, Debug)]
struct Bare<B: Backend> {
    linear: Linear<B>,
}

impl<B: Backend> LightningModule<B> for Bare<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = (self.linear.forward(batch.x) - batch.y).square().mean();
        log.log("train_loss", loss)
    }
}

#[derive(Deserialize)]
struct ModelConfig {
    lr: f64,
}

impl<B: AutodiffBackend> TrainingModule<B> for Bare<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(
        &self,
        hparams: &Hparams,
    ) -> anyhow::Result<Optimizers<Self::Optimizer, f64>> {
        let config: ModelConfig = hparams.model()?;
        Ok(Optimizers::sgd(config.lr))
    }
}

fn loader(n: usize, offset: usize) -> Loader<Item> {
    Loader::new(InMemDataset::new(items(n, offset)), 8)
}

fn trainer(root: &std::path::Path, lr: f64) -> Trainer<B> {
    let options = TrainerOptions {
        seed: Some(3),
        max_epochs: Some(2),
        enable_progress_bar: false,
        enable_model_summary: false,
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    };
    let plan = Plan::local("cpu", Precision::F32True);
    Trainer::<B>::new::<CpuAccelerator>(&plan, options)
        .unwrap()
        .with_hparams(json!({"model": {"lr": lr}}))
}

fn weights(model: &Bare<B>) -> Vec<f32> {
    model.linear.weight.val().into_data().to_vec().unwrap()
}

#[test]
fn a_model_without_validation_step_trains_and_skips_the_val_loader() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = trainer(dir.path(), 0.1);
    let model = Bare {
        linear: LinearConfig::new(FEATURES, 1).init(trainer.device()),
    };
    let before = weights(&model);
    let mut data = DataLoaders::new(ItemBatcher)
        .train(loader(32, 0).shuffled())
        .val(loader(16, 1000));
    let out = trainer.fit(model, &mut data).unwrap();
    assert_eq!(out.global_step, 8, "2 epochs of 4 batches");
    assert_ne!(
        weights(&out.model),
        before,
        "lr 0.1 from the hparams trains"
    );
    assert!(
        !out.metrics.keys().any(|k| k.starts_with("val")),
        "{:?}",
        out.metrics
    );
}

#[test]
fn hyperparameters_reach_configure_optimizers() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = trainer(dir.path(), 0.0);
    let model = Bare {
        linear: LinearConfig::new(FEATURES, 1).init(trainer.device()),
    };
    let before = weights(&model);
    let mut data = DataLoaders::new(ItemBatcher).train(loader(32, 0));
    let out = trainer.fit(model, &mut data).unwrap();
    assert_eq!(
        weights(&out.model),
        before,
        "lr 0 from the hparams leaves the weights"
    );

    let mut trainer = Trainer::<B>::on_device(FlexDevice, TrainerOptions::default())
        .unwrap()
        .with_hparams(json!({"model": {"lr": "fast"}}));
    let model = Bare {
        linear: LinearConfig::new(FEATURES, 1).init(trainer.device()),
    };
    let err = trainer.fit(model, &mut data).unwrap_err();
    assert!(
        format!("{err:#}").contains("reading the `model` hyperparameters"),
        "{err:#}"
    );
}

#[test]
fn validate_test_and_predict_name_the_step_the_model_lacks() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = trainer(dir.path(), 0.1);
    let model = || Bare::<Flex> {
        linear: LinearConfig::new(FEATURES, 1).init(&FlexDevice),
    };
    let mut data = DataLoaders::new(ItemBatcher)
        .val(loader(16, 0))
        .test(loader(16, 0))
        .predict(loader(16, 0));
    let missing = |err: anyhow::Error| err.downcast::<MissingStep>().map(|m| m.0).ok();
    let err = trainer.validate(model(), &mut data).unwrap_err();
    assert_eq!(missing(err), Some("validation_step"));
    let err = trainer.test(model(), &mut data).unwrap_err();
    assert_eq!(missing(err), Some("test_step"));
    let err = trainer
        .predict::<_, _, f32>(model(), &mut data)
        .unwrap_err();
    assert_eq!(missing(err), Some("predict_step"));
    assert_eq!(
        MissingStep("predict_step").to_string(),
        "the model has no predict_step: implement LightningModule::predict_step for it"
    );
}
