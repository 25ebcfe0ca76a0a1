//! A hand-written burn training loop for the digits MLP.
//!
//! It is what a burn user writes without a framework: the reference the Trainer is compared
//! with (tests/trainer_vs_hand.rs) and measured against (`cargo xtask bench overhead`).

use std::path::PathBuf;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams, Optimizer};
use burn::tensor::ElementConversion as _;
use burn::tensor::backend::{AutodiffBackend, Backend};
use ember::plugins::Shard;
use ember::{FlagError, epoch_permutation};
use serde::{Deserialize, Serialize};

use crate::data::{Digits, batch_of};
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
    /// Seed for the stratified split (the Trainer's `seed` drives weights and shuffles).
    pub seed: u64,
    /// Threads making batches ahead of the step (0: the training thread makes them).
    pub num_workers: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            path: None,
            batch_size: 64,
            val_fraction: 0.2,
            seed: 42,
            num_workers: 0,
        }
    }
}

impl DataConfig {
    /// The train and validation sets this config describes. A value it cannot use is a
    /// [`FlagError`] naming its key, which the CLI reports as bad input (exit 2).
    pub fn load(&self) -> anyhow::Result<(Digits, Digits)> {
        if self.batch_size == 0 {
            return Err(FlagError::new("--data.batch_size", "0", "an integer > 0").into());
        }
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            let value = self.val_fraction.to_string();
            return Err(FlagError::new("--data.val_fraction", value, "a share in (0, 1)").into());
        }
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
    /// The part of `seconds` spent in validation passes.
    pub val_seconds: f64,
    /// Validation accuracy after each epoch.
    pub val_accuracy: Vec<f64>,
}

impl FitReport {
    /// Training steps per second.
    pub fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.seconds
    }
}

/// Share of `data` that `model` classifies correctly.
pub fn accuracy<B: Backend>(model: &Mlp<B>, data: &Digits, device: &B::Device) -> f64 {
    let all: Vec<usize> = (0..data.len()).collect();
    let batch = batch_of::<B>(data, &all, device);
    let correct = model
        .forward(batch.images)
        .argmax(1)
        .squeeze_dim::<1>(1)
        .equal(batch.labels)
        .int()
        .sum();
    let correct: i64 = correct.into_scalar().elem();
    correct as f64 / data.len() as f64
}

/// Trains a fresh model for `epochs` epochs with Adam and returns it with a report.
///
/// `data_config.seed` seeds the weights and the shuffles (ember's [`epoch_permutation`], so a
/// Trainer with the same seed sees the same batches). Subnormal floats are flushed to zero on
/// this thread and rayon's pool, as a Trainer on a CPU does by default. `on_epoch(epoch, val_accuracy)` is
/// called after each epoch.
pub fn fit_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model_config: &ModelConfig,
    data_config: &DataConfig,
    epochs: usize,
    on_epoch: impl FnMut(usize, f64),
) -> anyhow::Result<(Mlp<B>, FitReport)> {
    by_hand(device, model_config, data_config, epochs, Some(on_epoch))
}

/// [`fit_by_hand`] without the validation after each epoch: training steps only.
pub fn train_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model_config: &ModelConfig,
    data_config: &DataConfig,
    epochs: usize,
) -> anyhow::Result<(Mlp<B>, FitReport)> {
    by_hand(
        device,
        model_config,
        data_config,
        epochs,
        None::<fn(usize, f64)>,
    )
}

fn by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model_config: &ModelConfig,
    data_config: &DataConfig,
    epochs: usize,
    mut on_epoch: Option<impl FnMut(usize, f64)>,
) -> anyhow::Result<(Mlp<B>, FitReport)> {
    let (train, val) = data_config.load()?;
    // The Trainer's CPU default (`--trainer.flush_denormal`), so both compute alike.
    ember::set_flush_denormal_everywhere(true);
    B::seed(device, data_config.seed);
    let mut model = model_config.init::<B>(device);
    let mut optimizer = AdamConfig::new().init::<B, Mlp<B>>();
    let mut report = FitReport {
        steps: 0,
        seconds: 0.0,
        val_seconds: 0.0,
        val_accuracy: Vec::with_capacity(epochs),
    };
    let start = Instant::now();
    for epoch in 0..epochs {
        let order = epoch_permutation(train.len(), data_config.seed, epoch as u64);
        for indices in order.chunks(data_config.batch_size) {
            let batch = batch_of::<B>(&train, indices, device);
            let loss = model.loss(batch.images, batch.labels);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(model_config.lr, model, grads);
            // Read the loss each step, as a loop that logs it does (and the Trainer does): on a
            // lazy backend (xla) the read is where a step's program ends, so without it a whole
            // epoch would compile as one program and round differently (~4e-8 apart after 3
            // epochs of digits). On eager backends the read costs a one-element copy.
            let _ = loss.into_scalar();
            report.steps += 1;
        }
        if let Some(on_epoch) = &mut on_epoch {
            let validating = Instant::now();
            let acc = accuracy(&model.valid(), &val, device);
            report.val_seconds += validating.elapsed().as_secs_f64();
            report.val_accuracy.push(acc);
            on_epoch(epoch, acc);
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok((model, report))
}

/// The reference for data-parallel training (tests/ddp.rs): one process that, for every
/// optimizer step, accumulates the batches the `world` ranks of a ddp run would each see at
/// that step, in rank order, each loss divided by `world`. Returns the model after `epochs`.
pub fn train_shards_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model_config: &ModelConfig,
    data_config: &DataConfig,
    epochs: usize,
    world: usize,
) -> anyhow::Result<Mlp<B>> {
    let (train, _) = data_config.load()?;
    ember::set_flush_denormal_everywhere(true);
    B::seed(device, data_config.seed);
    let mut model = model_config.init::<B>(device);
    let mut optimizer = AdamConfig::new().init::<B, Mlp<B>>();
    for epoch in 0..epochs {
        let order = epoch_permutation(train.len(), data_config.seed, epoch as u64);
        let shards: Vec<Vec<usize>> = (0..world)
            .map(|rank| Shard { rank, world }.take(&order))
            .collect();
        // Every shard has the same length, so every rank runs the same number of steps.
        let batches: Vec<Vec<&[usize]>> = shards
            .iter()
            .map(|s| s.chunks(data_config.batch_size).collect())
            .collect();
        for step in 0..batches[0].len() {
            let mut accumulator = GradientsAccumulator::<Mlp<B>>::new();
            for rank_batches in &batches {
                let batch = batch_of::<B>(&train, rank_batches[step], device);
                let loss = model
                    .loss(batch.images, batch.labels)
                    .div_scalar(world as f64);
                accumulator
                    .accumulate(&model, GradientsParams::from_grads(loss.backward(), &model));
            }
            model = optimizer.step(model_config.lr, model, accumulator.grads());
        }
    }
    Ok(model)
}
