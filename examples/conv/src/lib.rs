//! The conv example: a small CNN on the 8×8 digits, with what the MLP never had: batch norm
//! (running statistics), dropout (a random layer) and a learning rate that decays per epoch.
//! Its data is the digits example's.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::lr_scheduler::exponential::{
    ExponentialLrScheduler, ExponentialLrSchedulerConfig,
};
use burn::prelude::*;
use digits::data::{CLASSES, DigitsBatch, DigitsData};
use digits::model::loss_and_accuracy;
use ember::FlagError;
use ember::nn::{BatchNorm, BatchNormConfig};
use ember::optim;
use ember::prelude::*;
use serde::{Deserialize, Serialize};

/// The `model` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConvConfig {
    /// Output channels of the two 3×3 convolutions.
    pub channels: [usize; 2],
    /// Dropout probability before the classifier.
    pub dropout: f64,
    /// Adam's learning rate in the first epoch.
    pub lr: f64,
    /// The learning rate is multiplied by this after every epoch.
    pub lr_decay: f64,
}

impl Default for ConvConfig {
    fn default() -> Self {
        Self {
            channels: [16, 32],
            dropout: 0.25,
            lr: 3e-3,
            lr_decay: 0.9,
        }
    }
}

/// Two conv-batchnorm-relu blocks, a 2×2 max pool, dropout and a linear classifier.
#[derive(Module, Debug)]
pub struct ConvNet<B: Backend> {
    conv1: Conv2d<B>,
    norm1: BatchNorm<B>,
    conv2: Conv2d<B>,
    norm2: BatchNorm<B>,
    pool: MaxPool2d,
    dropout: Dropout,
    classifier: Linear<B>,
    activation: Relu,
}

impl<B: Backend> ConvNet<B> {
    /// A freshly initialised network.
    pub fn new(config: &ConvConfig, device: &B::Device) -> Self {
        let [c1, c2] = config.channels;
        let conv = |from, to| {
            Conv2dConfig::new([from, to], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        Self {
            conv1: conv(1, c1),
            norm1: BatchNormConfig::new(c1).init(device),
            conv2: conv(c1, c2),
            norm2: BatchNormConfig::new(c2).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            dropout: DropoutConfig::new(config.dropout).init(),
            classifier: LinearConfig::new(c2 * 4 * 4, CLASSES).init(device),
            activation: Relu::new(),
        }
    }

    /// Logits `[n, 10]` of flattened 8×8 images `[n, 64]`.
    pub fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2> {
        let n = images.dims()[0];
        let x = images.reshape([n, 1, 8, 8]);
        let x = self
            .activation
            .forward(self.norm1.forward(self.conv1.forward(x)));
        let x = self
            .activation
            .forward(self.norm2.forward(self.conv2.forward(x)));
        let x = self.pool.forward(x).flatten::<2>(1, 3);
        self.classifier.forward(self.dropout.forward(x))
    }

    /// Loss and accuracy of one batch, and its size.
    fn evaluate(&self, batch: DigitsBatch<B>) -> (Tensor<B, 1>, Tensor<B, 1>, usize) {
        let n = batch.labels.dims()[0];
        let (loss, accuracy) = loss_and_accuracy(self.forward(batch.images), batch.labels);
        (loss, accuracy, n)
    }
}

impl<B: Backend> LightningModule<B> for ConvNet<B> {
    type Batch = DigitsBatch<B>;

    fn training_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let (loss, accuracy, n) = self.evaluate(batch);
        log.log_with("train_loss", &loss, LogOptions::default().prog_bar());
        log.log_with("train_acc", accuracy, LogOptions::default().batch_size(n));
        loss
    }

    fn validation_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) {
        let (loss, accuracy, n) = self.evaluate(batch);
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("val_loss", loss, options);
        log.log_with("val_acc", accuracy, options.prog_bar());
    }

    fn predict_step(&self, batch: DigitsBatch<B>) -> Prediction {
        let digits = self.forward(batch.images).argmax(1).into_data();
        Prediction::of(
            digits
                .convert::<i64>()
                .into_vec::<i64>()
                .unwrap_or_default(),
        )
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for ConvNet<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = ExponentialLrScheduler;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        let config: ConvConfig = hparams.model()?;
        // The exponential schedule takes a rate and a factor in (0, 1]; a value outside is
        // bad input, named as the flag that set it.
        for (flag, value) in [
            ("--model.lr", config.lr),
            ("--model.lr_decay", config.lr_decay),
        ] {
            if !(value > 0.0 && value <= 1.0) {
                return Err(FlagError::new(flag, value.to_string(), "a number in (0, 1]").into());
            }
        }
        let scheduler = ExponentialLrSchedulerConfig::new(config.lr, config.lr_decay)
            .init()
            .map_err(anyhow::Error::msg)?;
        Ok(Optimizers::new(optim::AdamConfig::new().init(), scheduler).per_epoch())
    }
}

/// The conv application.
pub struct Conv;

impl App for Conv {
    const NAME: &'static str = "conv";
    const ABOUT: &'static str = "Train a small CNN on 8x8 handwritten digits with ember";
    type ModelConfig = ConvConfig;
    type Data = DigitsData;
    type Model<B: AutodiffBackend> = ConvNet<B>;

    fn model<B: AutodiffBackend>(config: &ConvConfig, device: &B::Device) -> ConvNet<B> {
        ConvNet::new(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        TrainerFlags::default().max_epochs(15).seed(42)
    }
}
