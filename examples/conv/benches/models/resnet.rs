//! The ResNet of the comparison: its generated images, its hand-written burn loop, and the
//! files the PyTorch side reads.

use std::path::Path;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use digits::model::loss_and_accuracy;
use ember::epoch_permutation;
use images::generated::{ImageBatcher, ImageItem, ImagesConfig};
use images::model::{ImageBatch, LR, ResNet, ResNetConfig};

/// The images every contender trains on.
pub fn images() -> ImagesConfig {
    ImagesConfig::default()
}

/// The ResNet trained by a hand-written burn loop: the epochs' shuffles of ember's seed, Adam
/// at a constant rate, validation accuracy after every epoch.
pub fn resnet_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    epochs: usize,
    seed: u64,
) -> anyhow::Result<(u64, f64, f64)> {
    let config = images();
    let (train, val) = config.generate();
    ember::set_flush_denormal_everywhere(true);
    B::seed(device, seed);
    let net = ResNet::<B>::new(&ResNetConfig::default(), device);
    let mut optimizer = AdamConfig::new().init::<B, ResNet<B>>();
    let pick = |set: &[ImageItem], indices: &[usize]| -> Vec<ImageItem> {
        indices.iter().map(|&i| set[i].clone()).collect()
    };
    let (mut net, mut steps, mut val_s, mut val_acc) = (net, 0, 0.0, f64::NAN);
    let start = Instant::now();
    for epoch in 0..epochs {
        let order = epoch_permutation(train.len(), seed, epoch as u64);
        for indices in order.chunks(config.batch_size) {
            let (images, labels): ImageBatch<B> = ImageBatcher.batch(pick(&train, indices), device);
            let (loss, _) = loss_and_accuracy(net.forward(images), labels);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(LR, net, grads);
            let _ = loss.into_scalar();
            steps += 1;
        }
        let validating = Instant::now();
        let valid = net.valid();
        let (mut correct, mut seen) = (0.0, 0);
        let all: Vec<usize> = (0..val.len()).collect();
        for indices in all.chunks(config.batch_size) {
            let (images, labels): ImageBatch<B::InnerBackend> =
                ImageBatcher.batch(pick(&val, indices), device);
            let (_, acc) = loss_and_accuracy(valid.forward(images), labels);
            correct += acc.into_scalar().elem::<f64>() * indices.len() as f64;
            seen += indices.len();
        }
        val_acc = correct / seen as f64;
        val_s += validating.elapsed().as_secs_f64();
    }
    Ok((steps, start.elapsed().as_secs_f64() - val_s, val_acc))
}

/// Floating-point operations of one training step: the forward pass's multiply-adds × 2,
/// × 3 for the forward and both backward passes.
pub fn flops_per_step() -> f64 {
    let images = images();
    let macs = ResNetConfig::default().forward_macs(images.side) * images.batch_size as u64;
    (macs * 2 * 3) as f64
}

/// Writes the images for the PyTorch side in `dir` (the digits split's file names and
/// formats: `train_x.f32` little-endian pixels, `train_y.u8` labels, the same for `val`).
pub fn write_images(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let (train, val) = images().generate();
    for (name, set) in [("train", &train), ("val", &val)] {
        let pixels: Vec<u8> = set
            .iter()
            .flat_map(|item| item.pixels.iter().flat_map(|p| p.to_le_bytes()))
            .collect();
        std::fs::write(dir.join(format!("{name}_x.f32")), pixels)?;
        let labels: Vec<u8> = set.iter().map(|item| item.label).collect();
        std::fs::write(dir.join(format!("{name}_y.u8")), labels)?;
    }
    Ok(())
}
