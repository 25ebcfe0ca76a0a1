//! A wide MLP on synthetic data, trained with Adam (`wide_adam`) or SGD with momentum
//! (`wide_sgd`): the model the sharded strategy is tested and benchmarked with.
//!
//! Inputs are pseudo-random in [-1, 1); each label is the class a fixed random linear teacher
//! scores highest, so the task is learnable and the same on every run and rank.

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{SgdConfig, momentum::MomentumConfig};
use burn::prelude::*;
use ember::prelude::*;
use ember::{metrics, optim};
use serde::{Deserialize, Serialize};

/// The `model` section: `--model.hidden=[2048,2048] --model.lr=0.001`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WideConfig {
    /// Input features.
    pub inputs: usize,
    /// Widths of the hidden layers.
    pub hidden: Vec<usize>,
    /// Classes.
    pub classes: usize,
    /// Learning rate.
    pub lr: f64,
}

impl Default for WideConfig {
    fn default() -> Self {
        Self {
            inputs: 32,
            hidden: vec![128, 128, 128],
            classes: 8,
            lr: 1e-3,
        }
    }
}

/// The `data` section: `--data.samples=4096 --data.batch_size=64`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct WideDataConfig {
    /// Training samples (a quarter as many again validate).
    pub samples: usize,
    /// Batch size.
    pub batch_size: usize,
    /// Input features (the model's `inputs`).
    pub inputs: usize,
    /// Classes (the model's `classes`).
    pub classes: usize,
}

impl Default for WideDataConfig {
    fn default() -> Self {
        Self {
            samples: 1024,
            batch_size: 64,
            inputs: 32,
            classes: 8,
        }
    }
}

/// A pseudo-random value in [-1, 1) for `(stream, index)` (SplitMix64's finaliser).
fn uniform(stream: u64, index: u64) -> f32 {
    let mut z = stream.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index.wrapping_add(0xBF58_476D);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// One sample: features and class.
#[derive(Debug, Clone)]
pub struct Sample {
    x: Vec<f32>,
    class: i64,
}

/// Samples `offset..offset + n`, labelled by the teacher.
fn samples(config: &WideDataConfig, offset: usize, n: usize) -> Vec<Sample> {
    let (d, k) = (config.inputs, config.classes);
    let teacher: Vec<f32> = (0..d * k).map(|i| uniform(1, i as u64)).collect();
    (offset..offset + n)
        .map(|s| {
            let x: Vec<f32> = (0..d).map(|j| uniform(2, (s * d + j) as u64)).collect();
            let score = |c: usize| (0..d).map(|j| x[j] * teacher[j * k + c]).sum::<f32>();
            let class = (0..k)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap_or(0);
            Sample {
                x,
                class: class as i64,
            }
        })
        .collect()
}

/// Features `[n, inputs]` and classes `[n]`.
#[derive(Debug, Clone)]
pub struct WideBatch<B: Backend> {
    x: Tensor<B, 2>,
    classes: Tensor<B, 1, Int>,
}

/// Stacks samples into a batch.
#[derive(Debug, Clone, Default)]
pub struct WideBatcher;

impl<B: Backend> Batcher<B, Sample, WideBatch<B>> for WideBatcher {
    fn batch(&self, items: Vec<Sample>, device: &B::Device) -> WideBatch<B> {
        let d = items.first().map_or(0, |s| s.x.len());
        let x: Vec<f32> = items.iter().flat_map(|s| s.x.iter().copied()).collect();
        let classes: Vec<i64> = items.iter().map(|s| s.class).collect();
        WideBatch {
            x: Tensor::from_data(TensorData::new(x, [items.len(), d]), device),
            classes: Tensor::from_data(TensorData::new(classes, [items.len()]), device),
        }
    }
}

/// The synthetic data set; the `data` section is its config.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WideData {
    config: WideDataConfig,
}

impl DataModule for WideData {
    type Item = Sample;
    type Batcher = WideBatcher;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Sample>>> {
        let set = samples(&self.config, 0, self.config.samples);
        let train = Loader::new(InMemDataset::new(set), self.config.batch_size);
        Ok(Some(train.shuffled()))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Sample>>> {
        let n = self.config.samples / 4;
        let set = samples(&self.config, self.config.samples, n);
        Ok(Some(Loader::new(
            InMemDataset::new(set),
            self.config.batch_size,
        )))
    }
}

/// Linear layers with ReLU between them.
#[derive(Module, Debug)]
pub struct Wide<B: Backend> {
    layers: Vec<Linear<B>>,
    activation: Relu,
}

impl<B: Backend> Wide<B> {
    fn new(config: &WideConfig, device: &B::Device) -> Self {
        let mut widths = vec![config.inputs];
        widths.extend(&config.hidden);
        widths.push(config.classes);
        let layers = widths
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        Self {
            layers,
            activation: Relu::new(),
        }
    }

    fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i < last {
                x = self.activation.forward(x);
            }
        }
        x
    }

    fn training_step(&self, batch: WideBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = metrics::cross_entropy(self.forward(batch.x), batch.classes);
        log.log("train_loss", loss)
    }

    fn validation_step(&self, batch: WideBatch<B>, log: &mut StepLog<B>) {
        let n = batch.classes.dims()[0];
        let accuracy = metrics::accuracy(self.forward(batch.x), batch.classes);
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("val_acc", accuracy, options.prog_bar());
    }
}

/// Defines a model around [`Wide`] trained by one optimizer, and its application.
macro_rules! wide_app {
    ($app:ident, $model:ident, $name:literal, $optimizer:ty, $init:expr) => {
        #[doc = concat!("[`Wide`] trained by `", stringify!($optimizer), "`.")]
        #[derive(Module, Debug)]
        pub struct $model<B: Backend> {
            net: Wide<B>,
        }

        impl<B: Backend> LightningModule<B> for $model<B> {
            type Batch = WideBatch<B>;

            fn training_step(&self, batch: WideBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
                self.net.training_step(batch, log)
            }

            fn validation_step(&self, batch: WideBatch<B>, log: &mut StepLog<B>) {
                self.net.validation_step(batch, log)
            }
        }

        impl<B: AutodiffBackend> TrainingModule<B> for $model<B> {
            type Optimizer = $optimizer;
            type Scheduler = f64;

            fn configure_optimizers(
                &self,
                hparams: &Hparams,
            ) -> anyhow::Result<Optimizers<Self::Optimizer, f64>> {
                let config: WideConfig = hparams.model()?;
                Ok(Optimizers::new($init, config.lr))
            }
        }

        #[doc = concat!("`", $name, "`: [`", stringify!($model), "`] on synthetic data.")]
        pub struct $app;

        impl App for $app {
            const NAME: &'static str = $name;
            const ABOUT: &'static str = "A wide MLP on synthetic data (ember's sharding tests)";
            type ModelConfig = WideConfig;
            type Data = WideData;
            type Model<B: AutodiffBackend> = $model<B>;

            fn model<B: AutodiffBackend>(config: &WideConfig, device: &B::Device) -> $model<B> {
                $model {
                    net: Wide::new(config, device),
                }
            }

            fn trainer_defaults() -> TrainerFlags {
                TrainerFlags::default().max_epochs(2).seed(7)
            }
        }
    };
}

wide_app!(
    WideAdam,
    AdamWide,
    "wide_adam",
    optim::Adam<Self, B>,
    optim::AdamConfig::new().init()
);
wide_app!(
    WideSgd,
    SgdWide,
    "wide_sgd",
    optim::Sgd<Self, B>,
    SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init()
);
