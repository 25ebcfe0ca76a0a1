//! The streaming part of `cargo xtask bench data`: one epoch of a fit streaming a corpus of
//! token shards (`Loader::from_shards`, shuffled through its buffer, 2 workers) into a model
//! small enough that reading, batching and the loop decide (an embedding of each token,
//! averaged over the window, then a linear layer guessing the window's first token's parity).
//! Run at two corpus sizes, its peak RSS shows whether memory grows with the corpus.

use std::path::Path;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::prelude::*;
use ember::{Shards, TokenWindows, TrainerOptions};
use ember::{metrics, optim};
use rand::{RngExt, SeedableRng};

/// Tokens per window, and windows per batch.
const WINDOW: usize = 256;
const BATCH: usize = 128;
/// Token ids are below this.
const VOCAB: usize = 256;
/// Tokens per shard file (16 MiB of `u16`).
const SHARD_TOKENS: usize = 8 << 20;

/// Writes `shards` shard files of random tokens under `dir`.
pub fn write_corpus(dir: &Path, shards: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(shards as u64);
    for s in 0..shards {
        let bytes: Vec<u8> = (0..SHARD_TOKENS)
            .flat_map(|_| (rng.random_range(0..VOCAB as u16)).to_le_bytes())
            .collect();
        std::fs::write(dir.join(format!("{s:04}.bin")), bytes)?;
    }
    Ok(())
}

/// Bytes of a corpus of `shards` shards.
pub fn corpus_bytes(shards: usize) -> u64 {
    (shards * SHARD_TOKENS * 2) as u64
}

/// Windows as token ids `[n, WINDOW]` and each one's first token's parity.
#[derive(Clone, Copy, Default)]
struct Windows;

impl<B: Backend> Batcher<B, Vec<u32>, (Tensor<B, 2, Int>, Tensor<B, 1, Int>)> for Windows {
    fn batch(
        &self,
        items: Vec<Vec<u32>>,
        device: &B::Device,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 1, Int>) {
        let n = items.len();
        let parity: Vec<i64> = items.iter().map(|w| i64::from(w[0] % 2)).collect();
        let ids: Vec<i64> = items.into_iter().flatten().map(i64::from).collect();
        (
            Tensor::from_data(TensorData::new(ids, [n, WINDOW]), device),
            Tensor::from_data(TensorData::new(parity, [n]), device),
        )
    }
}

#[derive(Module, Debug)]
struct BagOfTokens<B: Backend> {
    embed: Embedding<B>,
    out: Linear<B>,
}

impl<B: Backend> LightningModule<B> for BagOfTokens<B> {
    type Batch = (Tensor<B, 2, Int>, Tensor<B, 1, Int>);

    fn training_step(&self, (ids, parity): Self::Batch, log: &mut StepLog<B>) -> Tensor<B, 1> {
        let mean = self.embed.forward(ids).mean_dim(1).squeeze_dim(1);
        log.log(
            "train_loss",
            metrics::cross_entropy(self.out.forward(mean), parity),
        )
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for BagOfTokens<B> {
    type Optimizer = optim::Adam<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _: &Hparams) -> ConfiguredOptimizers<Self, B> {
        Ok(Optimizers::adam(1e-3))
    }
}

/// One epoch over the shards in `dir`: the JSON report (windows, seconds).
pub fn fit(dir: &Path) -> anyhow::Result<String> {
    type B = Autodiff<Flex>;
    let shards = Shards::in_dir(dir, ".bin", TokenWindows::u16(WINDOW))?;
    let loader = Loader::from_shards(shards, BATCH).shuffled().num_workers(2);
    let windows = loader.num_batches() * BATCH;
    let logs = tempfile::tempdir()?;
    let options = TrainerOptions {
        seed: Some(1),
        max_epochs: Some(1),
        logger: Vec::new(),
        enable_checkpointing: false,
        enable_progress_bar: false,
        enable_model_summary: false,
        num_sanity_val_steps: Some(0),
        default_root_dir: logs.path().to_owned(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?;
    let model = BagOfTokens {
        embed: EmbeddingConfig::new(VOCAB, 16).init(trainer.device()),
        out: LinearConfig::new(16, 2).init(trainer.device()),
    };
    let start = Instant::now();
    trainer.fit(model, &mut DataLoaders::new(Windows).train(loader))?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(format!(r#"{{"windows": {windows}, "seconds": {seconds}}}"#))
}
