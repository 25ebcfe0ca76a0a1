//! A small ResNet for 32×32 RGB images, the size of model users train on CIFAR-like data: a
//! 3×3 stem (3→32) with batch norm and ReLU, two residual blocks at 32 channels, a strided
//! residual block to 64 channels (its shortcut a strided 1×1 convolution with batch norm),
//! global average pooling and a linear classifier. Convolutions carry no bias (batch norm
//! follows each), as torchvision's ResNets do. The batch norms are ember's (`ember::nn`): burn's
//! layer, fused into one kernel each way on `cpu`.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::prelude::*;
use digits::model::loss_and_accuracy;
use ember::nn::{BatchNorm, BatchNormConfig};
use ember::optim;
use ember::prelude::*;
use serde::{Deserialize, Serialize};

/// The widths and classes of a [`ResNet`]: the `model` section of the config.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResNetConfig {
    /// Input channels (3 for RGB).
    pub in_channels: usize,
    /// Channels of the stem and the first two blocks; the strided block doubles them.
    pub width: usize,
    /// Classes of the classifier.
    pub classes: usize,
}

impl Default for ResNetConfig {
    fn default() -> Self {
        Self {
            in_channels: 3,
            width: 32,
            classes: 10,
        }
    }
}

impl ResNetConfig {
    /// Multiply-adds of one image's forward pass at `side`×`side` input, counted from the
    /// layer shapes (convolutions and the classifier; batch norm, ReLU and pooling are
    /// elementwise and left out).
    pub fn forward_macs(&self, side: usize) -> u64 {
        let (c, w) = (self.in_channels as u64, self.width as u64);
        let full = (side * side) as u64;
        let half = full / 4;
        let conv3 = |from: u64, to: u64, positions: u64| positions * to * from * 9;
        conv3(c, w, full)
            + 4 * conv3(w, w, full)
            + conv3(w, 2 * w, half)
            + conv3(2 * w, 2 * w, half)
            + half * 2 * w * w
            + 2 * w * self.classes as u64
    }
}

/// A 3×3 convolution at `stride` with padding 1 and no bias.
fn conv3x3<B: Backend>(from: usize, to: usize, stride: usize, device: &B::Device) -> Conv2d<B> {
    Conv2dConfig::new([from, to], [3, 3])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_bias(false)
        .init(device)
}

/// Conv, batch norm, ReLU, conv, batch norm, plus the shortcut, then ReLU.
#[derive(Module, Debug)]
pub struct Residual<B: Backend> {
    conv1: Conv2d<B>,
    norm1: BatchNorm<B>,
    conv2: Conv2d<B>,
    norm2: BatchNorm<B>,
    /// A strided 1×1 convolution and batch norm where the block changes shape.
    shortcut: Option<(Conv2d<B>, BatchNorm<B>)>,
    activation: Relu,
}

impl<B: Backend> Residual<B> {
    /// A block from `from` to `to` channels, halving the side when `stride` is 2.
    pub fn new(from: usize, to: usize, stride: usize, device: &B::Device) -> Self {
        let shortcut = (stride != 1 || from != to).then(|| {
            let conv = Conv2dConfig::new([from, to], [1, 1])
                .with_stride([stride, stride])
                .with_bias(false)
                .init(device);
            (conv, BatchNormConfig::new(to).init(device))
        });
        Self {
            conv1: conv3x3(from, to, stride, device),
            norm1: BatchNormConfig::new(to).init(device),
            conv2: conv3x3(to, to, 1, device),
            norm2: BatchNormConfig::new(to).init(device),
            shortcut,
            activation: Relu::new(),
        }
    }

    /// The block's output for `x` `[n, from, h, w]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = self
            .activation
            .forward(self.norm1.forward(self.conv1.forward(x.clone())));
        let y = self.norm2.forward(self.conv2.forward(y));
        let skip = match &self.shortcut {
            Some((conv, norm)) => norm.forward(conv.forward(x)),
            None => x,
        };
        self.activation.forward(y + skip)
    }
}

/// The network: stem, three residual blocks, global average pooling, classifier.
#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    stem: Conv2d<B>,
    stem_norm: BatchNorm<B>,
    blocks: Vec<Residual<B>>,
    pool: AdaptiveAvgPool2d,
    classifier: Linear<B>,
    activation: Relu,
}

impl<B: Backend> ResNet<B> {
    /// A freshly initialised network.
    pub fn new(config: &ResNetConfig, device: &B::Device) -> Self {
        let w = config.width;
        Self {
            stem: conv3x3(config.in_channels, w, 1, device),
            stem_norm: BatchNormConfig::new(w).init(device),
            blocks: vec![
                Residual::new(w, w, 1, device),
                Residual::new(w, w, 1, device),
                Residual::new(w, 2 * w, 2, device),
            ],
            pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            classifier: LinearConfig::new(2 * w, config.classes).init(device),
            activation: Relu::new(),
        }
    }

    /// Logits `[n, classes]` of images `[n, channels, h, w]`.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let mut x = self
            .activation
            .forward(self.stem_norm.forward(self.stem.forward(images)));
        for block in &self.blocks {
            x = block.forward(x);
        }
        self.classifier
            .forward(self.pool.forward(x).flatten::<2>(1, 3))
    }
}

/// A batch: images `[n, channels, h, w]` and their classes `[n]`, as `Stack` makes them from
/// `(TensorData, i64)` items.
pub type ImageBatch<B> = (Tensor<B, 4>, Tensor<B, 1, Int>);

/// Adam's learning rate (constant).
pub const LR: f64 = 1e-3;

impl<B: Backend> ResNet<B> {
    /// Loss and accuracy of one batch, and its size.
    fn evaluate(&self, (images, labels): ImageBatch<B>) -> (Tensor<B, 1>, Tensor<B, 1>, usize) {
        let n = labels.dims()[0];
        let (loss, accuracy) = loss_and_accuracy(self.forward(images), labels);
        (loss, accuracy, n)
    }
}

impl<B: Backend> LightningModule<B> for ResNet<B> {
    type Batch = ImageBatch<B>;

    fn training_step(&self, batch: ImageBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let (loss, _, _) = self.evaluate(batch);
        log.log_with("train_loss", loss, LogOptions::default().prog_bar())
    }

    fn validation_step(&self, batch: ImageBatch<B>, log: &mut StepLog<B>) {
        let (loss, accuracy, n) = self.evaluate(batch);
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("val_loss", loss, options);
        log.log_with("val_acc", accuracy, options.prog_bar());
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for ResNet<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        Ok(Optimizers::adam(LR))
    }
}
