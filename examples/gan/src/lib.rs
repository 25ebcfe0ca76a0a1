//! The GAN example: a generator and a discriminator trained against each other on the 8×8
//! digits by manual optimization with two Adams (Lightning's `automatic_optimization = False`
//! GAN, in ember). Each epoch rank 0 draws a 4×4 grid of generated digits into
//! `<log_dir>/samples/epoch=N.png`. Its data is the digits example's; the labels go unused.

mod grid;

use burn::module::AutodiffModule;
use burn::nn::{LeakyRelu, LeakyReluConfig, Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::{sigmoid, softplus};
use digits::data::{DigitsBatch, DigitsData, PIXELS};
use ember::optim;
use ember::prelude::*;
use ember::{EpochEnd, FlagError, Manual};
use serde::{Deserialize, Serialize};

/// The `model` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GanConfig {
    /// Size of the generator's input noise.
    pub latent: usize,
    /// Width of both networks' hidden layer.
    pub hidden: usize,
    /// Both Adams' learning rate.
    pub lr: f64,
    /// Adam's β1 (0.5 is the usual choice for GANs).
    pub beta_1: f32,
}

impl Default for GanConfig {
    fn default() -> Self {
        Self {
            latent: 16,
            hidden: 128,
            lr: 2e-3,
            beta_1: 0.5,
        }
    }
}

/// Noise to 64 pixels in 0..1.
#[derive(Module, Debug)]
pub struct Generator<B: Backend> {
    hidden: Linear<B>,
    output: Linear<B>,
    activation: LeakyRelu,
}

impl<B: Backend> Generator<B> {
    /// Images `[n, 64]` for noise `[n, latent]`.
    pub fn forward(&self, noise: Tensor<B, 2>) -> Tensor<B, 2> {
        sigmoid(
            self.output
                .forward(self.activation.forward(self.hidden.forward(noise))),
        )
    }
}

/// 64 pixels to a logit: how real the image looks.
#[derive(Module, Debug)]
pub struct Discriminator<B: Backend> {
    hidden: Linear<B>,
    output: Linear<B>,
    activation: LeakyRelu,
}

impl<B: Backend> Discriminator<B> {
    /// Logits `[n, 1]` for images `[n, 64]`.
    pub fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2> {
        self.output
            .forward(self.activation.forward(self.hidden.forward(images)))
    }
}

/// The two networks; optimizer 0 trains the generator, optimizer 1 the discriminator.
#[derive(Module, Debug)]
pub struct GanModel<B: Backend> {
    /// Makes digits from noise.
    pub generator: Generator<B>,
    /// Tells made digits from real ones.
    pub discriminator: Discriminator<B>,
    latent: usize,
}

impl<B: Backend> GanModel<B> {
    /// Freshly initialised networks.
    pub fn new(config: &GanConfig, device: &B::Device) -> Self {
        let activation = LeakyReluConfig::new().with_negative_slope(0.2).init();
        Self {
            generator: Generator {
                hidden: LinearConfig::new(config.latent, config.hidden).init(device),
                output: LinearConfig::new(config.hidden, PIXELS).init(device),
                activation: activation.clone(),
            },
            discriminator: Discriminator {
                hidden: LinearConfig::new(PIXELS, config.hidden).init(device),
                output: LinearConfig::new(config.hidden, 1).init(device),
                activation,
            },
            latent: config.latent,
        }
    }

    /// Standard normal noise for `n` images, from the backend's generator (which the Trainer
    /// seeds per batch, so a resumed fit draws what the uninterrupted one did).
    fn noise(&self, n: usize, device: &B::Device) -> Tensor<B, 2> {
        Tensor::random([n, self.latent], Distribution::Normal(0.0, 1.0), device)
    }

    /// The discriminator's loss: real images should score 1, made ones 0 (binary cross-entropy
    /// on logits: `softplus(-x)` for 1, `softplus(x)` for 0).
    fn discriminator_loss(&self, real: Tensor<B, 2>, made: Tensor<B, 2>) -> Tensor<B, 1> {
        let real = softplus(self.discriminator.forward(real).neg(), 1.0).mean();
        let made = softplus(self.discriminator.forward(made), 1.0).mean();
        (real + made).div_scalar(2.0)
    }

    /// The generator's loss: made images should score 1.
    fn generator_loss(&self, noise: Tensor<B, 2>) -> Tensor<B, 1> {
        let made = self.generator.forward(noise);
        softplus(self.discriminator.forward(made).neg(), 1.0).mean()
    }
}

impl<B: Backend> LightningModule<B> for GanModel<B> {
    type Batch = DigitsBatch<B>;

    /// How real the discriminator finds held-out digits, and how real it finds made ones.
    fn validation_step(&self, batch: DigitsBatch<B>, log: &mut StepLog<B>) {
        let n = batch.images.dims()[0];
        let made = self
            .generator
            .forward(self.noise(n, &batch.images.device()));
        let real = sigmoid(self.discriminator.forward(batch.images)).mean();
        let fake = sigmoid(self.discriminator.forward(made)).mean();
        let options = LogOptions::default().batch_size(n);
        log.log_with("val_real_score", real, options);
        log.log_with("val_made_score", fake, options);
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for GanModel<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        let config: GanConfig = hparams.model()?;
        if !(config.lr > 0.0 && config.lr.is_finite()) {
            return Err(FlagError::new("--model.lr", config.lr.to_string(), "a number > 0").into());
        }
        let adam = || optim::AdamConfig::new().with_beta_1(config.beta_1).init();
        Ok(Optimizers::new(adam(), config.lr)
            .and(adam(), config.lr)
            .manual())
    }

    /// The discriminator steps on real and (detached) made digits, then the generator steps
    /// to make digits the updated discriminator takes for real.
    fn manual_training_step(
        self,
        batch: DigitsBatch<B>,
        opt: &mut Manual<'_, B, Self>,
        log: &mut StepLog<B>,
    ) -> anyhow::Result<Self> {
        let n = batch.images.dims()[0];
        let noise = self.noise(n, &batch.images.device());
        let compute = opt.compute(&self);
        let made = compute.generator.forward(noise.clone()).detach();
        let d_loss = compute.discriminator_loss(batch.images, made);
        log.log_with("d_loss", &d_loss, LogOptions::default().prog_bar());
        let mut grads = opt.backward(d_loss);
        let grads = GradientsParams::from_module(&mut grads, &self.discriminator);
        let model = opt.step(1, self, grads)?;
        let g_loss = opt.compute(&model).generator_loss(noise);
        log.log_with("g_loss", &g_loss, LogOptions::default().prog_bar());
        let mut grads = opt.backward(g_loss);
        let grads = GradientsParams::from_module(&mut grads, &model.generator);
        opt.step(0, model, grads)
    }

    /// Rank 0 draws the generator's digits for a fixed noise into the log directory.
    fn on_train_epoch_end(&self, end: &EpochEnd<'_>) -> anyhow::Result<()> {
        let Some(dir) = end.log_dir.filter(|_| end.is_global_zero) else {
            return Ok(());
        };
        let generator = self.generator.valid();
        let device = generator.devices().into_iter().next().unwrap_or_default();
        let noise = grid::fixed_noise(self.latent);
        let noise = Tensor::from_data(TensorData::new(noise, [grid::COUNT, self.latent]), &device);
        let pixels: Vec<f32> = generator
            .forward(noise)
            .into_data()
            .convert::<f32>()
            .to_vec()
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let path = dir.join("samples").join(format!("epoch={}.png", end.epoch));
        grid::write(&path, &pixels)
    }
}

/// The GAN application.
pub struct Gan;

impl App for Gan {
    const NAME: &'static str = "gan";
    const ABOUT: &'static str =
        "Train a GAN on 8x8 handwritten digits with ember's manual optimization";
    type ModelConfig = GanConfig;
    type Data = DigitsData;
    type Model<B: AutodiffBackend> = GanModel<B>;

    fn model<B: AutodiffBackend>(config: &GanConfig, device: &B::Device) -> GanModel<B> {
        GanModel::new(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        TrainerFlags::default().max_epochs(20).seed(7)
    }
}
