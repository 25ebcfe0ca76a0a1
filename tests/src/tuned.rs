//! A model with a backbone (a linear layer and a batch norm) under a linear head, trained by
//! SGD on the regression items: what the fine-tuning and weight-averaging tests train.

use std::path::Path;

use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use ember::{
    DataLoaders, Hparams, LightningModule, Loader, Optimizers, StepLog, TrainerOptions,
    TrainingModule, optim,
};

use crate::regression::{Batch, FEATURES, Item, ItemBatcher, items};
use crate::resume::float_bytes;

/// The backbone: a linear layer, then a batch norm.
#[derive(Module, Debug)]
pub struct Backbone<B: Backend> {
    /// `FEATURES` to 4.
    pub linear: Linear<B>,
    /// Over the 4 hidden features.
    pub norm: BatchNorm<B>,
}

/// A backbone under a linear head, trained by SGD at [`LR`].
#[derive(Module, Debug)]
pub struct Tuned<B: Backend> {
    /// The part fine-tuning freezes.
    pub backbone: Backbone<B>,
    /// 4 to 1, after a tanh.
    pub head: Linear<B>,
}

impl<B: Backend> Tuned<B> {
    /// A model whose weights are drawn now (burn draws a parameter when it is first read, and
    /// a clone of an unread model draws its own).
    pub fn new(device: &B::Device) -> Self {
        let model = Self {
            backbone: Backbone {
                linear: LinearConfig::new(FEATURES, 4).init(device),
                norm: BatchNormConfig::new(4).init(device),
            },
            head: LinearConfig::new(4, 1).init(device),
        };
        float_bytes(&model);
        model
    }

    /// The mean squared error on `batch`.
    pub fn loss(&self, batch: &Batch<B>) -> Tensor<B, 1> {
        let hidden = self
            .backbone
            .norm
            .forward(self.backbone.linear.forward(batch.x.clone()));
        let diff = self.head.forward(hidden.tanh()) - batch.y.clone();
        diff.square().mean()
    }
}

impl<B: Backend> LightningModule<B> for Tuned<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        log.log("train_loss", self.loss(&batch))
    }

    fn validation_step(&self, batch: Batch<B>, log: &mut StepLog<B>) {
        log.log("val_loss", self.loss(&batch));
    }
}

/// The SGD rate.
pub const LR: f64 = 0.05;

impl<B: AutodiffBackend> TrainingModule<B> for Tuned<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _: &Hparams) -> anyhow::Result<Optimizers<Self::Optimizer>> {
        Ok(Optimizers::sgd(LR))
    }
}

/// 16 training items in batches of `batch`, unshuffled.
pub fn data(batch: usize) -> DataLoaders<Item, ItemBatcher> {
    DataLoaders::new(ItemBatcher).train(Loader::new(InMemDataset::new(items(16, 0)), batch))
}

/// Seed 5, `max_epochs`, a step-metric write every step, nothing else written.
pub fn options(root: &Path, max_epochs: u64) -> TrainerOptions {
    TrainerOptions {
        seed: Some(5),
        max_epochs: Some(max_epochs),
        enable_progress_bar: false,
        enable_model_summary: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        log_every_n_steps: 1,
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    }
}
