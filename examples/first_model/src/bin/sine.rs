//! A newcomer's first program, written with what ember offers: sin(3x) learned by
//! a 3-layer MLP from generated points, with Adam and a mean squared error.

use burn::data::dataset::InMemDataset;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::tanh;
use ember::optim;
use ember::prelude::*;

/// x in [-1, 1] and sin(3x).
type Sample = ([f32; 1], [f32; 1]);

/// `n` samples spread evenly over [-1, 1], every `step`-th of them from `offset` on.
fn samples(n: usize, offset: usize, step: usize) -> InMemDataset<Sample> {
    let sample = |i: usize| {
        let x = (i * step + offset) as f32 / (n * step) as f32 * 2.0 - 1.0;
        ([x], [(3.0 * x).sin()])
    };
    InMemDataset::new((0..n).map(sample).collect())
}

/// The data module and the `data` section: `--data.samples=2000 --data.batch_size=64`.
#[derive(Config, Debug, ConfigDefault)]
pub struct SineData {
    #[config(default = 1000)]
    samples: usize,
    #[config(default = 32)]
    batch_size: usize,
}

impl DataModule for SineData {
    type Item = Sample;
    type Batcher = Stack;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Sample>>> {
        let train = Loader::new(samples(self.samples, 0, 2), self.batch_size);
        Ok(Some(train.shuffled()))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Sample>>> {
        let val = Loader::new(samples(self.samples, 1, 2), self.batch_size);
        Ok(Some(val))
    }
}

/// The `model` section: `--model.hidden=64 --model.lr=0.003`.
#[derive(Config, Debug, ConfigDefault)]
pub struct SineConfig {
    #[config(default = 32)]
    hidden: usize,
    #[config(default = 1e-2)]
    lr: f64,
}

/// The config builds the model on whichever backend the run uses.
impl InitModel<SineData> for SineConfig {
    type Model<B: AutodiffBackend> = Sine<B>;

    fn init<B: AutodiffBackend>(&self, device: &B::Device) -> Sine<B> {
        let widths = [1, self.hidden, self.hidden, 1];
        let layers = widths
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device));
        Sine {
            layers: layers.collect(),
        }
    }
}

/// Three layers with tanh between them.
#[derive(Module, Debug)]
pub struct Sine<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Sine<B> {
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let (last, hidden) = self.layers.split_last().expect("three layers");
        let x = hidden.iter().fold(x, |x, layer| tanh(layer.forward(x)));
        last.forward(x)
    }

    fn loss(&self, (x, y): (Tensor<B, 2>, Tensor<B, 2>)) -> Tensor<B, 1> {
        MseLoss::new().forward(self.forward(x), y, Reduction::Mean)
    }
}

impl<B: Backend> LightningModule<B> for Sine<B> {
    type Batch = (Tensor<B, 2>, Tensor<B, 2>);

    fn training_step(&self, batch: Self::Batch, log: &mut StepLog<B>) -> Tensor<B, 1> {
        log.log("train_loss", self.loss(batch))
    }

    fn validation_step(&self, batch: Self::Batch, log: &mut StepLog<B>) {
        log.log("val_loss", self.loss(batch));
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Sine<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        Ok(Optimizers::adam(hparams.model::<SineConfig>()?.lr))
    }
}

fn main() -> std::process::ExitCode {
    ember::run::<(SineConfig, SineData)>()
}
