//! A model of two parts for the manual-optimization tests: two linear layers whose outputs add
//! up, trained automatically, or manually with one optimizer or one per part.

use std::path::Path;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::Callback;
use ember::{
    Hparams, LightningModule, Manual, Optimizers, StepLog, Trainer, TrainerOptions, TrainingModule,
    optim,
};

use crate::regression::{Batch, Data, FEATURES, data};
use crate::resume::{Losses, RecordLosses, float_bytes};

/// The backend the pair trains on.
pub type B = Autodiff<Flex>;

/// How [`Pair`] is trained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// `training_step`; the Trainer steps one Adam.
    Automatic,
    /// `manual_training_step` steps one Adam over every parameter.
    ManualOne,
    /// `manual_training_step` steps one Adam over `a` and another over `b`, at these rates.
    ManualTwo(f64, f64),
    /// `configure_optimizers` asks for manual optimization; no `manual_training_step`.
    ManualWithoutStep,
    /// Two optimizers without manual optimization.
    AutomaticTwo,
}

/// Two linear layers whose outputs add up: `a` and `b` are the parts two optimizers train.
#[derive(Module, Debug)]
pub struct Pair<B: Backend> {
    /// One part.
    pub a: Linear<B>,
    /// The other part.
    pub b: Linear<B>,
    /// 0 automatic, 1 manual with one optimizer, 2 with two, 3 no manual step, 4 two automatic.
    mode: usize,
    /// The rates of the optimizers (`ManualTwo`'s, else the first).
    rates: [f64; 2],
}

impl<B: Backend> Pair<B> {
    /// A pair trained as `mode` says, its weights drawn now.
    pub fn new(device: &B::Device, mode: Mode) -> Self {
        let (code, rates) = match mode {
            Mode::Automatic => (0, [0.01; 2]),
            Mode::ManualOne => (1, [0.01; 2]),
            Mode::ManualTwo(a, b) => (2, [a, b]),
            Mode::ManualWithoutStep => (3, [0.01; 2]),
            Mode::AutomaticTwo => (4, [0.01; 2]),
        };
        let model = Self {
            a: LinearConfig::new(FEATURES, 1).init(device),
            b: LinearConfig::new(FEATURES, 1).init(device),
            mode: code,
            rates,
        };
        float_bytes(&model);
        model
    }

    /// Mean squared error on `batch`.
    pub fn loss(&self, batch: &Batch<B>) -> Tensor<B, 1> {
        let prediction = self.a.forward(batch.x.clone()) + self.b.forward(batch.x.clone());
        (prediction - batch.y.clone()).square().mean()
    }
}

impl<B: Backend> LightningModule<B> for Pair<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        log.log("train_loss", self.loss(&batch))
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Pair<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _: &Hparams) -> anyhow::Result<Optimizers<Self::Optimizer>> {
        let [a, b] = self.rates;
        let one = Optimizers::adam(a);
        Ok(match self.mode {
            0 => one,
            1 | 3 => one.manual(),
            4 => one.and(optim::AdamConfig::new().init(), b),
            _ => one.and(optim::AdamConfig::new().init(), b).manual(),
        })
    }

    fn manual_training_step(
        self,
        batch: Batch<B>,
        opt: &mut Manual<'_, B, Self>,
        log: &mut StepLog<B>,
    ) -> anyhow::Result<Self> {
        let loss = opt.compute(&self).loss(&batch);
        log.log("train_loss", &loss);
        match self.mode {
            1 => {
                let grads = GradientsParams::from_grads(opt.backward(loss), &self);
                opt.step(0, self, grads)
            }
            2 => {
                let mut grads = opt.backward(loss);
                let a = GradientsParams::from_module(&mut grads, &self.a);
                let b = GradientsParams::from_module(&mut grads, &self.b);
                let model = opt.step(0, self, a)?;
                opt.step(1, model, b)
            }
            _ => Err(ember::MissingStep("manual_training_step").into()),
        }
    }
}

/// A quiet 3-epoch fit under `root` that logs every step.
pub fn options(root: &Path) -> TrainerOptions {
    TrainerOptions {
        seed: Some(11),
        max_epochs: Some(3),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        enable_model_summary: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    }
}

/// 32 training items in batches of 8, no validation.
pub fn pair_data() -> Data {
    data(32, 0, 8)
}

/// What a fit ended with.
pub struct Fitted {
    /// Every float tensor's bytes.
    pub weights: Vec<Vec<u8>>,
    /// `(global step, train_loss bits)` after every batch.
    pub losses: Vec<(u64, u64)>,
    /// Optimizer steps in all.
    pub global_step: u64,
}

/// Fits a new pair with `trainer`, stopping (with a checkpoint) at `stop_at`.
pub fn fit_with(
    trainer: Trainer<B>,
    mode: Mode,
    stop_at: Option<(u64, std::path::PathBuf)>,
) -> anyhow::Result<Fitted> {
    let seen = Losses::default();
    let record = RecordLosses {
        seen: seen.clone(),
        stop_at,
    };
    let mut trainer = trainer.with_callbacks(vec![Box::new(record) as Box<dyn Callback>]);
    let model = Pair::<B>::new(trainer.device(), mode);
    let out = trainer.fit(model, &mut pair_data())?;
    Ok(Fitted {
        weights: float_bytes(&out.model),
        losses: seen.borrow().clone(),
        global_step: out.global_step,
    })
}

/// Fits a new pair on a Trainer without an accelerator.
pub fn fit(options: TrainerOptions, mode: Mode) -> anyhow::Result<Fitted> {
    fit_with(Trainer::on_device(FlexDevice, options)?, mode, None)
}
