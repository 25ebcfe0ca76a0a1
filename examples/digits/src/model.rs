//! The digits model: an MLP with ReLU activations.

use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;
use ember::prelude::*;
use ember::{metrics, optim};
use serde::{Deserialize, Serialize};

use crate::data::{CLASSES, DigitsBatch, PIXELS};

/// The `model` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Widths of the hidden layers.
    pub hidden: Vec<usize>,
    /// Adam learning rate.
    pub lr: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            hidden: vec![256, 256],
            lr: 1e-3,
        }
    }
}

impl ModelConfig {
    /// A freshly initialised MLP `64 → hidden… → 10`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let mut width = PIXELS;
        let mut hidden = Vec::with_capacity(self.hidden.len());
        for &h in &self.hidden {
            hidden.push(LinearConfig::new(width, h).init(device));
            width = h;
        }
        Mlp {
            hidden,
            output: LinearConfig::new(width, CLASSES).init(device),
            activation: Relu::new(),
        }
    }
}

/// A multi-layer perceptron over flattened 8×8 images.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden: Vec<Linear<B>>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Mlp<B> {
    /// Logits for a batch `[n, 64]` → `[n, 10]`.
    pub fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        for layer in &self.hidden {
            x = self.activation.forward(layer.forward(x));
        }
        self.output.forward(x)
    }

    /// Mean cross-entropy of the logits of `x` against `labels`.
    pub fn loss(&self, x: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        metrics::cross_entropy(self.forward(x), labels)
    }
}

/// The digits model as the Trainer sees it.
#[derive(Module, Debug)]
pub struct DigitsModel<B: Backend> {
    /// The network.
    pub mlp: Mlp<B>,
}

impl<B: Backend> DigitsModel<B> {
    /// A freshly initialised model.
    pub fn new(config: &ModelConfig, device: &B::Device) -> Self {
        Self {
            mlp: config.init(device),
        }
    }

    /// Loss and accuracy of one batch, and its size.
    fn evaluate(&self, batch: DigitsBatch<B>) -> (Tensor<B, 1>, Tensor<B, 1>, usize) {
        let n = batch.labels.dims()[0];
        let (loss, accuracy) = loss_and_accuracy(self.mlp.forward(batch.images), batch.labels);
        (loss, accuracy, n)
    }
}

/// Mean cross-entropy and accuracy of `logits` `[n, 10]` against `labels` `[n]`.
pub fn loss_and_accuracy<B: Backend>(
    logits: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
) -> (Tensor<B, 1>, Tensor<B, 1>) {
    let loss = metrics::cross_entropy(logits.clone(), labels.clone());
    (loss, metrics::accuracy(logits, labels))
}

impl<B: Backend> LightningModule<B> for DigitsModel<B> {
    type Batch = DigitsBatch<B>;

    fn training_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = self.mlp.loss(batch.images, batch.labels);
        log.log_with("train_loss", loss, LogOptions::default().prog_bar())
    }

    fn validation_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) {
        let (loss, accuracy, n) = self.evaluate(batch);
        // sync_dist: under ddp each rank validates a shard; the logged value covers them all.
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("val_loss", loss, options);
        log.log_with("val_acc", accuracy, options.prog_bar());
    }

    fn test_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) {
        let (loss, accuracy, n) = self.evaluate(batch);
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("test_loss", loss, options);
        log.log_with("test_acc", accuracy, options);
    }

    fn predict_step(&self, batch: DigitsBatch<B>) -> Prediction {
        let digits = self.mlp.forward(batch.images).argmax(1).into_data();
        Prediction::of(
            digits
                .convert::<i64>()
                .into_vec::<i64>()
                .unwrap_or_default(),
        )
    }
}

/// Adam at `model.lr` (burn's settings: epsilon 1e-5), unless the run's config chooses
/// another optimizer or a scheduler (`--optimizer=SGD --optimizer.lr=0.1`,
/// `--lr_scheduler=StepLR --lr_scheduler.step_size=5`).
impl<B: AutodiffBackend> TrainingModule<B> for DigitsModel<B> {
    type Optimizer = optim::AnyOptimizer<Self, B>;
    type Scheduler = optim::AnyScheduler;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        let config: ModelConfig = hparams.model()?;
        let adam = optim::AdamArgs {
            lr: config.lr,
            eps: 1e-5,
            ..optim::AdamArgs::default()
        };
        Optimizers::from_hparams(hparams, optim::OptimizerSpec::Adam(adam))
    }
}
