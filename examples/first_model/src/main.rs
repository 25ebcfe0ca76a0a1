//! The program docs/getting-started.md builds, step by step: points inside or outside a
//! circle, classified by a small MLP, trained with `first_model fit`.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamConfig;
use burn::prelude::*;
use ember::prelude::*;
use serde::{Deserialize, Serialize};

/// One point and whether it lies inside the unit circle.
#[derive(Debug, Clone)]
pub struct Point {
    xy: [f32; 2],
    inside: bool,
}

/// `n` points spread over [-1.5, 1.5]², the same every run.
fn points(n: usize, offset: usize) -> Vec<Point> {
    (offset..offset + n)
        .map(|i| {
            let x = ((i as f32) * 0.618_034).fract() * 3.0 - 1.5;
            let y = ((i as f32) * 0.754_878).fract() * 3.0 - 1.5;
            Point {
                xy: [x, y],
                inside: x * x + y * y < 1.0,
            }
        })
        .collect()
}

/// A batch: coordinates `[n, 2]` and classes `[n]` (1 inside, 0 outside).
#[derive(Debug, Clone)]
pub struct PointBatch<B: Backend> {
    xy: Tensor<B, 2>,
    classes: Tensor<B, 1, Int>,
}

/// Stacks points into a batch, on any backend.
#[derive(Debug, Clone, Default)]
pub struct PointBatcher;

impl<B: Backend> Batcher<B, Point, PointBatch<B>> for PointBatcher {
    fn batch(&self, items: Vec<Point>, device: &B::Device) -> PointBatch<B> {
        let xy: Vec<f32> = items.iter().flat_map(|p| p.xy).collect();
        let classes: Vec<i64> = items.iter().map(|p| i64::from(p.inside)).collect();
        PointBatch {
            xy: Tensor::from_data(TensorData::new(xy, [items.len(), 2]), device),
            classes: Tensor::from_data(TensorData::new(classes, [items.len()]), device),
        }
    }
}

/// The `data` section of the config: `--data.batch_size=64`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct DataConfig {
    batch_size: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self { batch_size: 32 }
    }
}

/// 2000 training points and 500 others for validation.
pub struct PointData {
    config: DataConfig,
    batcher: PointBatcher,
}

impl DataModule for PointData {
    type Item = Point;
    type Batcher = PointBatcher;

    fn batcher(&self) -> &PointBatcher {
        &self.batcher
    }

    fn train_loader(&self) -> Option<Loader<Point>> {
        let set = Arc::new(InMemDataset::new(points(2000, 0)));
        Some(Loader::new(set, self.config.batch_size).shuffled())
    }

    fn val_loader(&self) -> Option<Loader<Point>> {
        let set = Arc::new(InMemDataset::new(points(500, 2000)));
        Some(Loader::new(set, self.config.batch_size))
    }
}

/// The `model` section of the config: `--model.hidden=64 --model.lr=0.01`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    hidden: usize,
    lr: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            hidden: 32,
            lr: 1e-2,
        }
    }
}

/// Two layers and a ReLU.
#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    hidden: Linear<B>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Classifier<B> {
    fn new(config: &ModelConfig, device: &B::Device) -> Self {
        Self {
            hidden: LinearConfig::new(2, config.hidden).init(device),
            output: LinearConfig::new(config.hidden, 2).init(device),
            activation: Relu::new(),
        }
    }

    fn forward(&self, xy: Tensor<B, 2>) -> Tensor<B, 2> {
        self.output
            .forward(self.activation.forward(self.hidden.forward(xy)))
    }
}

impl<B: Backend> LightningModule<B> for Classifier<B> {
    type Batch = PointBatch<B>;

    fn training_step(&self, batch: PointBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let logits = self.forward(batch.xy);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, batch.classes);
        log.log("train_loss", &loss);
        loss
    }

    fn validation_step(&self, batch: PointBatch<B>, log: &mut StepLog<B>) {
        let predicted = self.forward(batch.xy).argmax(1).squeeze_dim::<1>(1);
        let accuracy = predicted.equal(batch.classes).float().mean();
        log.log("val_acc", accuracy);
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Classifier<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(
        &self,
        hparams: &Hparams,
    ) -> anyhow::Result<Optimizers<Self::Optimizer, f64>> {
        let config: ModelConfig = hparams.model()?;
        Ok(Optimizers::new(AdamConfig::new().init(), config.lr))
    }
}

/// What `ember::run` needs: how to build the model on any backend, and the data.
struct FirstModel;

impl App for FirstModel {
    const NAME: &'static str = "first_model";
    const ABOUT: &'static str = "Points inside or outside a circle";
    type ModelConfig = ModelConfig;
    type DataConfig = DataConfig;
    type Data = PointData;
    type Model<B: AutodiffBackend> = Classifier<B>;

    fn model<B: AutodiffBackend>(config: &ModelConfig, device: &B::Device) -> Classifier<B> {
        Classifier::new(config, device)
    }

    fn data(config: &DataConfig) -> PointData {
        PointData {
            config: config.clone(),
            batcher: PointBatcher,
        }
    }
}

fn main() -> std::process::ExitCode {
    ember::run::<FirstModel>()
}
