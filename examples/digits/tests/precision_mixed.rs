//! bf16-mixed on cpu: f32 master weights, bf16 compute, f32 gradients. (Its own test binary:
//! a process trains in one float type per device.)

use burn::nn::LinearConfig;
use burn::optim::GradientsParams;
use burn::tensor::{DType, FloatDType, Tensor};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision, Trainer};
use ember_core::plugins::dtype;

mod common;

use common::dtypes;

type B = <CpuAccelerator as ember::Accelerator>::Backend;

#[test]
fn bf16_mixed_keeps_f32_masters_and_computes_in_bf16() {
    let plan = Plan::local("cpu", Precision::Bf16Mixed);
    let dir = tempfile::tempdir().unwrap();
    let options = common::three_epochs(dir.path());
    let mut trainer = Trainer::<B>::new::<CpuAccelerator>(&plan, options).unwrap();
    let device = *trainer.device();

    // The mechanism: batches and fresh weights are bf16 (the device's type); the master copy
    // is f32; a loss computed with the bf16 copy gives f32 gradients for the master.
    let layer = LinearConfig::new(4, 2).init::<B>(&device);
    assert_eq!(dtypes(&layer), vec![DType::BF16; 2]);
    let master = dtype::master(layer);
    assert_eq!(dtypes(&master), vec![DType::F32; 2]);
    let low = dtype::compute(master.clone(), FloatDType::BF16);
    assert_eq!(dtypes(&low), vec![DType::BF16; 2]);
    let x = Tensor::<B, 2>::ones([3, 4], &device);
    assert_eq!(x.dtype(), DType::BF16);
    let loss = low.forward(x).sum();
    assert_eq!(loss.dtype(), DType::BF16);
    let grads = GradientsParams::from_grads(loss.backward(), &master);
    let g = grads
        .get::<<B as burn::tensor::backend::AutodiffBackend>::InnerBackend, 2>(master.weight.id)
        .expect("the master weight has a gradient");
    assert_eq!(g.dtype(), DType::F32);

    // Through the Trainer: digits learns, and the trained weights are the f32 masters.
    let model = DigitsModel::<B>::new(&ModelConfig::default(), &device);
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    assert_eq!(dtypes(&out.model), vec![DType::F32; 6]);
    assert!(out.metrics["val_acc"] > 0.85, "{:?}", out.metrics);
}
