//! The digits model: an MLP with ReLU activations.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor};
use ember::{EvalModule, LogOptions, Optimizers, PredictModule, StepLog, TrainingModule};
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
        let logits = self.forward(x);
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, labels)
    }
}

/// The digits model as the Trainer sees it: the MLP and its learning rate.
#[derive(Module, Debug)]
pub struct DigitsModel<B: Backend> {
    /// The network.
    pub mlp: Mlp<B>,
    /// Adam's learning rate.
    pub lr: f64,
}

impl<B: Backend> DigitsModel<B> {
    /// A freshly initialised model.
    pub fn new(config: &ModelConfig, device: &B::Device) -> Self {
        Self {
            mlp: config.init(device),
            lr: config.lr,
        }
    }

    /// Loss and number of correct predictions of one batch.
    fn evaluate(&self, batch: DigitsBatch<B>) -> (Tensor<B, 1>, Tensor<B, 1>, usize) {
        let n = batch.labels.dims()[0];
        let logits = self.mlp.forward(batch.images);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), batch.labels.clone());
        let accuracy = logits
            .argmax(1)
            .squeeze_dim::<1>(1)
            .equal(batch.labels)
            .float()
            .mean();
        (loss, accuracy, n)
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for DigitsModel<B> {
    type Batch = DigitsBatch<B>;
    type Optimizer = OptimizerAdaptor<Adam, Self, B>;
    type Scheduler = f64;

    fn training_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = self.mlp.loss(batch.images, batch.labels);
        log.log_with("train_loss", &loss, LogOptions::default().prog_bar());
        loss
    }

    fn configure_optimizers(&self) -> Optimizers<Self::Optimizer, f64> {
        Optimizers::new(AdamConfig::new().init(), self.lr)
    }
}

impl<B: Backend> EvalModule<B> for DigitsModel<B> {
    type Batch = DigitsBatch<B>;

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
}

impl<B: Backend> PredictModule<B> for DigitsModel<B> {
    type Batch = DigitsBatch<B>;
    type Output = Vec<i64>;

    fn predict_step(&self, batch: DigitsBatch<B>) -> Vec<i64> {
        self.mlp
            .forward(batch.images)
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .into_vec()
            .unwrap_or_default()
    }
}
