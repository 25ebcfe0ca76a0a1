//! The program docs/getting-started.md builds, step by step: points inside or outside a
//! circle, classified by a small MLP, trained with `first_model fit`.

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::relu;
use ember::prelude::*;
use ember::{metrics, optim};

/// A point of [-1.5, 1.5]² and its class: 1 inside the unit circle, 0 outside.
type Point = ([f32; 2], i64);

/// Point `i` of a sequence spread over the square, the same every run.
fn point(i: usize) -> Point {
    let x = ((i as f32) * 0.618_034).fract() * 3.0 - 1.5;
    let y = ((i as f32) * 0.754_878).fract() * 3.0 - 1.5;
    ([x, y], i64::from(x * x + y * y < 1.0))
}

/// The data module, and the `data` section of the config: `--data.batch_size=64`.
#[derive(Config, Debug, ConfigDefault)]
pub struct PointData {
    #[config(default = 32)]
    batch_size: usize,
}

impl DataModule for PointData {
    type Item = Point;
    type Batcher = Stack;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Point>>> {
        let points = Loader::in_memory((0..2000).map(point), self.batch_size);
        Ok(Some(points.shuffled()))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Point>>> {
        let points = Loader::in_memory((2000..2500).map(point), self.batch_size);
        Ok(Some(points))
    }
}

/// The `model` section of the config: `--model.hidden=64 --model.lr=0.01`.
#[derive(Config, Debug, ConfigDefault)]
pub struct ModelConfig {
    #[config(default = 32)]
    hidden: usize,
    #[config(default = 1e-2)]
    lr: f64,
}

/// The model config builds the model, on whichever backend the run uses.
impl InitModel<PointData> for ModelConfig {
    type Model<B: AutodiffBackend> = Classifier<B>;

    fn init<B: AutodiffBackend>(&self, device: &B::Device) -> Classifier<B> {
        Classifier {
            hidden: LinearConfig::new(2, self.hidden).init(device),
            output: LinearConfig::new(self.hidden, 2).init(device),
        }
    }
}

/// Two layers and a ReLU.
#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    hidden: Linear<B>,
    output: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    fn forward(&self, xy: Tensor<B, 2>) -> Tensor<B, 2> {
        self.output.forward(relu(self.hidden.forward(xy)))
    }
}

impl<B: Backend> LightningModule<B> for Classifier<B> {
    /// Coordinates `[n, 2]` and classes `[n]`, as `Stack` makes them.
    type Batch = (Tensor<B, 2>, Tensor<B, 1, Int>);

    fn training_step(&self, (xy, classes): Self::Batch, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = metrics::cross_entropy(self.forward(xy), classes);
        log.log("train_loss", loss)
    }

    fn validation_step(&self, (xy, classes): Self::Batch, log: &mut StepLog<B>) {
        log.log("val_acc", metrics::accuracy(self.forward(xy), classes));
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Classifier<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        Ok(Optimizers::adam(hparams.model::<ModelConfig>()?.lr))
    }
}

/// The model config and the data module make the application, named after the program.
fn main() -> std::process::ExitCode {
    ember::run::<(ModelConfig, PointData)>()
}
