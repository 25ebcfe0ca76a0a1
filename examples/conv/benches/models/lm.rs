//! The transformers of the comparison: the example's model at its defaults and a larger one
//! (d_model 256, 4 blocks of 4 heads, context 128), their hand-written burn loop, FLOPs per
//! step, and the files the PyTorch side reads.

use std::path::Path;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::grad_clipping::GradientClippingConfig;
use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler as _;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use ember::epoch_permutation;
use transformer::data::TokenBatcher;
use transformer::{CharLm, DataConfig, LmConfig, TokenBatch, WarmupCosine};

/// The model and data settings of the default (`large` false) or the larger transformer.
pub fn configs(large: bool) -> (LmConfig, DataConfig) {
    match large {
        true => transformer::larger(),
        false => (LmConfig::default(), DataConfig::default()),
    }
}

/// Floating-point operations of one training step: the forward multiply-adds of a batch × 2,
/// × 3 for the forward and both backward passes.
pub fn flops_per_step(large: bool) -> f64 {
    let (model, data) = configs(large);
    (model.forward_macs(data.context) * data.batch_size as u64 * 2 * 3) as f64
}

/// The transformer trained by a hand-written burn loop: AdamW with its gradient norm clipped
/// at 1, the warm-up and cosine schedule per step, the epochs' shuffles of ember's seed, the
/// validation loss over every held-out window after every epoch.
pub fn lm_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    large: bool,
    epochs: usize,
    seed: u64,
) -> anyhow::Result<(u64, f64, f64)> {
    let (lm, data) = configs(large);
    let (train, val) = data.load()?;
    ember::set_flush_denormal_everywhere(true);
    B::seed(device, seed);
    let mut net = CharLm::<B>::new(&lm, device);
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(lm.weight_decay as f32)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init::<B, CharLm<B>>();
    let floor = lm.lr * lm.min_lr_ratio;
    let mut schedule = WarmupCosine::new(lm.lr, floor, lm.warmup_steps, lm.decay_steps);
    let (mut steps, mut val_s, mut val_loss) = (0, 0.0, f64::NAN);
    let start = Instant::now();
    for epoch in 0..epochs {
        let order = epoch_permutation(train.len(), seed, epoch as u64);
        for indices in order.chunks(data.batch_size) {
            let windows = indices.iter().map(|&i| train[i].clone()).collect();
            let batch: TokenBatch<B> = TokenBatcher.batch(windows, device);
            let loss = net.loss(batch.inputs, batch.targets);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(schedule.step(), net, grads);
            let _ = loss.into_scalar();
            steps += 1;
        }
        let validating = Instant::now();
        let batch: TokenBatch<B::InnerBackend> = TokenBatcher.batch(val.clone(), device);
        val_loss = net
            .valid()
            .loss(batch.inputs, batch.targets)
            .into_scalar()
            .elem::<f64>();
        val_s += validating.elapsed().as_secs_f64();
    }
    Ok((steps, start.elapsed().as_secs_f64() - val_s, val_loss))
}

/// Writes a transformer's windows and settings for scripts/bench/char_lm.py in `dir`.
pub fn write_windows(dir: &Path, large: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (lm, data) = configs(large);
    let (train, val) = data.load()?;
    for (name, set) in [("train.u8", &train), ("val.u8", &val)] {
        std::fs::write(
            dir.join(name),
            set.iter().flat_map(|w| w.0.clone()).collect::<Vec<u8>>(),
        )?;
    }
    let meta = serde_json::json!({
        "vocab": transformer::data::VOCAB, "context": data.context, "batch": data.batch_size,
        "d_model": lm.d_model, "heads": lm.heads, "layers": lm.layers, "mlp_ratio": lm.mlp_ratio,
        "dropout": lm.dropout, "lr": lm.lr, "weight_decay": lm.weight_decay,
        "warmup": lm.warmup_steps, "decay": lm.decay_steps, "min_lr_ratio": lm.min_lr_ratio,
        "max_context": lm.max_context,
    });
    std::fs::write(dir.join("meta.json"), meta.to_string())?;
    Ok(())
}
