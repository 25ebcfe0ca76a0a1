//! A hand-written burn training loop for the digits MLP.
//!
//! It is what a burn user writes without a framework; the `fit` command runs it until the
//! Trainer lands, and later it is the reference the Trainer is compared with.

use std::path::PathBuf;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::data::{Digits, PIXELS, epoch_order};
use crate::model::{Mlp, ModelConfig};

/// The `data` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// A `.csv.gz` file in the shipped format; the shipped data set when unset.
    pub path: Option<PathBuf>,
    /// Images per training batch.
    pub batch_size: usize,
    /// Share of each class held out for validation.
    pub val_fraction: f64,
    /// Seed for the split, the shuffles and the initial weights.
    pub seed: u64,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            path: None,
            batch_size: 64,
            val_fraction: 0.2,
            seed: 42,
        }
    }
}

impl DataConfig {
    /// The train and validation sets this config describes.
    pub fn load(&self) -> anyhow::Result<(Digits, Digits)> {
        anyhow::ensure!(self.batch_size > 0, "data.batch_size must be > 0");
        anyhow::ensure!(
            self.val_fraction > 0.0 && self.val_fraction < 1.0,
            "data.val_fraction must be in (0, 1)"
        );
        let all = match &self.path {
            Some(path) => Digits::load(path)?,
            None => Digits::shipped()?,
        };
        Ok(all.split(self.val_fraction, self.seed))
    }
}

/// What a fit did.
#[derive(Debug, Clone, PartialEq)]
pub struct FitReport {
    /// Optimizer steps taken.
    pub steps: usize,
    /// Wall time of the training steps and validation passes.
    pub seconds: f64,
    /// Validation accuracy after each epoch.
    pub val_accuracy: Vec<f64>,
}

impl FitReport {
    /// Training steps per second.
    pub fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.seconds
    }
}

/// The images of `indices` as a `[n, 64]` tensor and their labels.
pub fn batch<B: Backend>(
    data: &Digits,
    indices: &[usize],
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let mut pixels = Vec::with_capacity(indices.len() * PIXELS);
    let mut labels = Vec::with_capacity(indices.len());
    for &i in indices {
        pixels.extend_from_slice(&data.pixels[i * PIXELS..(i + 1) * PIXELS]);
        labels.push(i64::from(data.labels[i]));
    }
    let x = Tensor::from_data(TensorData::new(pixels, [indices.len(), PIXELS]), device);
    let y = Tensor::from_data(TensorData::new(labels, [indices.len()]), device);
    (x, y)
}

/// Share of `data` that `model` classifies correctly.
pub fn accuracy<B: Backend>(model: &Mlp<B>, data: &Digits, device: &B::Device) -> f64 {
    let all: Vec<usize> = (0..data.len()).collect();
    let (x, y) = batch::<B>(data, &all, device);
    let correct = model
        .forward(x)
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(y)
        .int()
        .sum();
    let correct: i64 = correct.into_scalar().elem();
    correct as f64 / data.len() as f64
}

use burn::tensor::ElementConversion as _;

/// Trains a fresh model for `epochs` epochs with Adam and returns it with a report.
/// `on_epoch(epoch, val_accuracy)` is called after each epoch.
pub fn fit_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model_config: &ModelConfig,
    data_config: &DataConfig,
    epochs: usize,
    mut on_epoch: impl FnMut(usize, f64),
) -> anyhow::Result<(Mlp<B>, FitReport)> {
    let (train, val) = data_config.load()?;
    B::seed(device, data_config.seed);
    let mut model = model_config.init::<B>(device);
    let mut optimizer = AdamConfig::new().init::<B, Mlp<B>>();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut report = FitReport {
        steps: 0,
        seconds: 0.0,
        val_accuracy: Vec::with_capacity(epochs),
    };
    let start = Instant::now();
    for epoch in 0..epochs {
        for indices in
            epoch_order(train.len(), data_config.seed, epoch).chunks(data_config.batch_size)
        {
            let (x, y) = batch::<B>(&train, indices, device);
            let loss = loss_fn.forward(model.forward(x), y);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(model_config.lr, model, grads);
            report.steps += 1;
        }
        let acc = accuracy(&model.valid(), &val, device);
        report.val_accuracy.push(acc);
        on_epoch(epoch, acc);
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok((model, report))
}
