//! The Rust contenders, each run inside a process of its own: a Trainer fit on one of ember's
//! accelerators, or a hand-written burn loop.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use convnet::ConvNet;
use digits::data::{DigitsBatch, DigitsData, batch_of};
use digits::model::{DigitsModel, ModelConfig, loss_and_accuracy};
use digits::train::fit_by_hand;
use ember::{Accelerator, Plan, Precision, Trainer, TrainerOptions, epoch_permutation};
use images::generated::GeneratedImages;
use images::model::{ResNet, ResNetConfig};
use transformer::{CharLm, CorpusData};

use crate::contest::ValClock;
use crate::{Kind, Model, SEED, Setting, conv_config, data_config, lm, resnet};

/// A Trainer fit on accelerator `A` in `setting`, progress bar off; returns steps, train
/// seconds and the final metric.
fn ember_fit<A: Accelerator>(model: Model, setting: Setting) -> anyhow::Result<(u64, f64, f64)> {
    let root = tempfile::tempdir()?;
    let mut options = TrainerOptions {
        seed: Some(SEED),
        max_epochs: Some(model.epochs as u64),
        enable_progress_bar: false,
        default_root_dir: root.path().to_owned(),
        // The transformer example's own default (`transformer fit`).
        gradient_clip_val: model.is_transformer().then_some(1.0),
        ..TrainerOptions::default()
    };
    if setting == Setting::Bare {
        options.logger = Vec::new();
        options.enable_checkpointing = false;
        options.enable_model_summary = false;
    }
    let val_seconds = Rc::new(Cell::new(0.0));
    let plan = Plan::local(A::name(), Precision::F32True);
    let mut trainer = Trainer::<A::Backend>::new::<A>(&plan, options)?
        .with_callback(ValClock::new(val_seconds.clone()));
    // Only `fit` is timed (model and data made before it), as the Python side times its fit.
    macro_rules! timed_fit {
        ($net:expr, $data:expr, $metric:literal) => {{
            let (net, mut data) = ($net, $data);
            let start = Instant::now();
            let out = trainer.fit(net, &mut data)?;
            let metric = out.metrics.get($metric).copied().unwrap_or(f64::NAN);
            (out.global_step, metric, start.elapsed())
        }};
    }
    let (steps, metric, seconds) = match model.kind {
        Kind::Mlp => {
            let net = DigitsModel::<A::Backend>::new(&ModelConfig::default(), trainer.device());
            timed_fit!(net, DigitsData::new(data_config()), "val_acc")
        }
        Kind::Cnn => {
            // The CNN's optimizer reads its rate and decay from the `model` hyperparameters.
            trainer = trainer.with_hparams(serde_json::json!({"model": conv_config(model)}));
            let net = ConvNet::<A::Backend>::new(&conv_config(model), trainer.device());
            timed_fit!(net, DigitsData::new(data_config()), "val_acc")
        }
        Kind::Transformer | Kind::TransformerL => {
            let (lm, data) = lm::configs(model.kind == Kind::TransformerL);
            trainer = trainer.with_hparams(serde_json::json!({"model": lm, "data": data}));
            let net = CharLm::<A::Backend>::new(&lm, trainer.device());
            timed_fit!(net, CorpusData::new(data), "val_loss")
        }
        Kind::ResNet => {
            let net = ResNet::<A::Backend>::new(&ResNetConfig::default(), trainer.device());
            timed_fit!(net, GeneratedImages::new(resnet::images()), "val_acc")
        }
    };
    let train_s = seconds.as_secs_f64() - val_seconds.get();
    Ok((steps, train_s, metric))
}

/// The CNN trained by a hand-written burn loop: the epochs' shuffles of ember's seed, Adam,
/// the rate decayed after every epoch, validation accuracy after every epoch.
fn cnn_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model: Model,
) -> anyhow::Result<(u64, f64, f64)> {
    let config = data_config();
    let (train, val) = config.load()?;
    ember::set_flush_denormal_everywhere(true);
    B::seed(device, config.seed);
    let mut net = ConvNet::<B>::new(&conv_config(model), device);
    let mut optimizer = AdamConfig::new().init::<B, ConvNet<B>>();
    let (mut steps, mut val_s, mut val_acc, mut lr) = (0, 0.0, f64::NAN, model.lr);
    let accuracy = |batch: DigitsBatch<B::InnerBackend>, net: &ConvNet<B::InnerBackend>| {
        let (_, acc) = loss_and_accuracy(net.forward(batch.images), batch.labels);
        acc.into_scalar().elem::<f64>()
    };
    let start = Instant::now();
    for epoch in 0..model.epochs {
        let order = epoch_permutation(train.len(), config.seed, epoch as u64);
        for indices in order.chunks(config.batch_size) {
            let batch = batch_of::<B>(&train, indices, device);
            let (loss, _) = loss_and_accuracy(net.forward(batch.images), batch.labels);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(lr, net, grads);
            let _ = loss.into_scalar();
            steps += 1;
        }
        lr *= model.lr_decay;
        let validating = Instant::now();
        let all: Vec<usize> = (0..val.len()).collect();
        val_acc = accuracy(
            batch_of::<B::InnerBackend>(&val, &all, device),
            &net.valid(),
        );
        val_s += validating.elapsed().as_secs_f64();
    }
    Ok((steps, start.elapsed().as_secs_f64() - val_s, val_acc))
}

/// Runs contender `name` on `model` in `setting` here and prints its JSON line.
pub fn contender(name: &str, model: Model, setting: Setting) -> anyhow::Result<()> {
    type Cpu = ember::cpu::CpuAccelerator;
    let (steps, train_s, metric) = match (name, model.kind) {
        ("ember", _) => ember_fit::<Cpu>(model, setting)?,
        #[cfg(feature = "tch")]
        ("ember-tch-cpu", _) => ember_fit::<ember::tch::TchCpuAccelerator>(model, setting)?,
        #[cfg(feature = "tpu-xla")]
        ("ember-xla", _) => ember_fit::<ember::xla::XlaAccelerator>(model, setting)?,
        ("burn-hand", Kind::Mlp) => {
            let config = ModelConfig::default();
            let (_, report) = fit_by_hand::<Autodiff<Flex>>(
                &FlexDevice,
                &config,
                &data_config(),
                model.epochs,
                |_, _| {},
            )?;
            let val_acc = report.val_accuracy.last().copied().unwrap_or(f64::NAN);
            (
                report.steps as u64,
                report.seconds - report.val_seconds,
                val_acc,
            )
        }
        ("burn-hand", Kind::Cnn) => cnn_by_hand::<Autodiff<Flex>>(&FlexDevice, model)?,
        ("burn-hand", Kind::Transformer | Kind::TransformerL) => {
            let large = model.kind == Kind::TransformerL;
            lm::lm_by_hand::<Autodiff<Flex>>(&FlexDevice, large, model.epochs, SEED)?
        }
        ("burn-hand", Kind::ResNet) => {
            resnet::resnet_by_hand::<Autodiff<Flex>>(&FlexDevice, model.epochs, SEED)?
        }
        (other, _) => anyhow::bail!("unknown contender {other}"),
    };
    let report = serde_json::json!({"steps": steps, "train_s": train_s, "metric": metric});
    println!("{report}");
    Ok(())
}
