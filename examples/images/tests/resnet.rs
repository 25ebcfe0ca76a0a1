//! The ResNet on generated images through the Trainer on cpu: it learns the classes, and two
//! fits with the same seed end with bitwise the same weights (its convolutions' weight
//! gradients are summed in an order that does not depend on threads).

use burn::data::dataloader::batcher::Batcher;
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::{Plan, Precision, Trainer, TrainerOptions};
use images::generated::{GeneratedImages, ImageBatcher, ImagesConfig};
use images::model::{ImageBatch, ResNet, ResNetConfig};

type B = Autodiff<Flex>;

/// Fits the ResNet on small generated images for `epochs`; returns val_acc and the fitted
/// model's logits of the validation images (which every weight and batch-norm statistic
/// reaches).
fn fit(epochs: u64) -> (f64, Vec<f32>) {
    let root = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(3),
        max_epochs: Some(epochs),
        enable_progress_bar: false,
        enable_checkpointing: false,
        default_root_dir: root.path().to_owned(),
        ..TrainerOptions::default()
    };
    let plan = Plan::local("cpu", Precision::F32True);
    let mut trainer =
        Trainer::<B>::new::<ember::cpu::CpuAccelerator>(&plan, options).expect("a cpu trainer");
    let images = ImagesConfig {
        train: 320,
        val: 80,
        side: 12,
        batch_size: 32,
        ..ImagesConfig::default()
    };
    let config = ResNetConfig {
        width: 8,
        ..ResNetConfig::default()
    };
    // The weights start from the same seed in each fit of this process.
    <B as Backend>::seed(&FlexDevice, 3);
    let net = ResNet::<B>::new(&config, &FlexDevice);
    let out = trainer
        .fit(net, &mut GeneratedImages::new(images))
        .expect("the fit runs");
    let (_, val) = images.generate();
    let batch: ImageBatch<Flex> = ImageBatcher.batch(val, &FlexDevice);
    let logits = out.model.valid().forward(batch.0).into_data();
    (out.metrics["val_acc"], logits.to_vec().unwrap())
}

#[test]
fn learns_the_generated_classes_and_repeats_bitwise() {
    let (val_acc, logits) = fit(4);
    assert!(
        val_acc >= 0.5,
        "val_acc {val_acc} after 4 epochs (chance is 0.1)"
    );
    let (again, same) = fit(4);
    assert_eq!(val_acc, again);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&logits) == bits(&same),
        "the same seed gave different weights"
    );
}

#[test]
fn forward_macs_count_every_convolution_and_the_classifier() {
    // 32×32: stem 3→32 (884,736), four 32→32 (4 × 9,437,184), the strided block's 32→64 and
    // 64→64 at 16×16 (4,718,592 + 9,437,184), its 1×1 shortcut (524,288), linear 64→10 (640).
    let macs = ResNetConfig::default().forward_macs(32);
    assert_eq!(
        macs,
        884_736 + 4 * 9_437_184 + 4_718_592 + 9_437_184 + 524_288 + 640
    );
}
