//! The transformer example: a small decoder-only character-level language model trained on
//! this project's own documentation (src/data.rs), with AdamW, a warm-up then cosine schedule
//! (src/schedule.rs) and gradient clipping. `fit` logs the loss and perplexity of training
//! and validation; `predict` continues the prompts of the data config.

pub mod data;
pub mod model;
pub mod schedule;
pub mod shards;

use burn::optim::AdamWConfig;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::activation::softmax;
use ember::FlagError;
use ember::optim;
use ember::prelude::*;

pub use data::{CorpusData, DataConfig, TokenBatch};
pub use model::{CharLm, LmConfig};
pub use schedule::WarmupCosine;

impl<B: Backend> LightningModule<B> for CharLm<B> {
    type Batch = TokenBatch<B>;

    fn training_step(&self, batch: TokenBatch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let loss = self.loss(batch.inputs, batch.targets);
        log.log_with("train_loss", &loss, LogOptions::default().prog_bar());
        log.log("train_ppl", loss.clone().exp());
        loss
    }

    /// One batch holds every held-out window (`CorpusData`), so `val_ppl` is the exponential
    /// of the mean loss (under ddp, the mean of the ranks' perplexities).
    fn validation_step(&self, batch: TokenBatch<B>, log: &mut StepLog<B>) {
        let n = batch.inputs.dims()[0];
        let loss = self.loss(batch.inputs, batch.targets);
        let options = LogOptions::default().batch_size(n).sync_dist();
        log.log_with("val_ppl", loss.clone().exp(), options);
        log.log_with("val_loss", loss, options.prog_bar());
    }

    /// The prompt followed by the characters the model samples one at a time.
    fn predict_step(&self, batch: TokenBatch<B>) -> Prediction {
        let config = &self.sampling;
        let device = batch.inputs.device();
        let mut tokens: Vec<i64> = batch
            .inputs
            .into_data()
            .convert::<i64>()
            .into_vec()
            .unwrap_or_default();
        for _ in 0..config.length {
            let start = tokens.len().saturating_sub(config.max_context);
            let window = Tensor::<B, 2, Int>::from_data(
                TensorData::new(tokens[start..].to_vec(), [1, tokens.len() - start]),
                &device,
            );
            let logits = self.forward(window);
            let [_, t, v] = logits.dims();
            let last = logits.slice([0..1, t - 1..t, 0..v]).reshape([v]);
            let next = if config.temperature > 0.0 {
                let probs = softmax(last.div_scalar(config.temperature), 0);
                let u = Tensor::<B, 1>::random([1], Distribution::Default, &device);
                // The first token whose cumulative probability passes u.
                probs.cumsum(0).lower_equal(u.expand([v])).int().sum()
            } else {
                last.argmax(0)
            };
            let next: i64 = next.into_scalar().elem();
            tokens.push(next.min(data::VOCAB as i64 - 1));
        }
        Prediction::of(
            tokens
                .into_iter()
                .map(|t| data::character(t as u8))
                .collect::<String>(),
        )
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for CharLm<B> {
    type Optimizer = optim::AdamW<Self, B>;
    type Scheduler = WarmupCosine;

    fn configure_optimizers(&self, hparams: &Hparams) -> ConfiguredOptimizers<Self, B> {
        let config: LmConfig = hparams.model()?;
        let data: DataConfig = hparams.section("data")?;
        check(&config, &data)?;
        let optimizer = AdamWConfig::new()
            .with_weight_decay(config.weight_decay as f32)
            .init();
        let floor = config.lr * config.min_lr_ratio;
        let schedule = WarmupCosine::new(config.lr, floor, config.warmup_steps, config.decay_steps);
        Ok(Optimizers::new(optimizer, schedule))
    }
}

/// The settings no model could train with, as flag errors (exit 2).
fn check(model: &LmConfig, data: &DataConfig) -> Result<(), FlagError> {
    let fail = |flag: &str, value: String, allowed: &str| Err(FlagError::new(flag, value, allowed));
    if model.heads == 0 || !model.d_model.is_multiple_of(model.heads) {
        return fail(
            "--model.heads",
            model.heads.to_string(),
            &format!("a divisor of --model.d_model ({})", model.d_model),
        );
    }
    if data.context > model.max_context {
        return fail(
            "--data.context",
            data.context.to_string(),
            &format!("at most --model.max_context ({})", model.max_context),
        );
    }
    if !(model.lr > 0.0 && model.lr <= 1.0) {
        return fail("--model.lr", model.lr.to_string(), "a number in (0, 1]");
    }
    if !(0.0..=1.0).contains(&model.min_lr_ratio) {
        return fail(
            "--model.min_lr_ratio",
            model.min_lr_ratio.to_string(),
            "a number in [0, 1]",
        );
    }
    Ok(())
}

/// The larger transformer the benchmarks train: d_model 256, 4 blocks of 4 heads, context 128,
/// the other settings the defaults.
pub fn larger() -> (LmConfig, DataConfig) {
    let model = LmConfig {
        d_model: 256,
        heads: 4,
        layers: 4,
        ..LmConfig::default()
    };
    let data = DataConfig {
        context: 128,
        ..DataConfig::default()
    };
    (model, data)
}

/// The transformer application.
pub struct CharLmApp;

impl App for CharLmApp {
    const NAME: &'static str = "transformer";
    const ABOUT: &'static str =
        "Train a small character-level transformer language model with ember";
    type ModelConfig = LmConfig;
    type Data = CorpusData;
    type Model<B: AutodiffBackend> = CharLm<B>;

    fn model<B: AutodiffBackend>(config: &LmConfig, device: &B::Device) -> CharLm<B> {
        CharLm::new(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        let mut flags = TrainerFlags::default().max_epochs(5).seed(42);
        flags.options.gradient_clip_val = Some(1.0);
        flags
    }
}
