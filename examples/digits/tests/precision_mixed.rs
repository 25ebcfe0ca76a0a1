//! bf16-mixed on cpu: bf16 on the device, f32 master weights after the fit. (Its own test binary:
//! a process trains in one float type per device.)

use burn::nn::LinearConfig;
use burn::tensor::{DType, Tensor};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision, Trainer};

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

    // Fresh weights and batches are bf16, the device's type under bf16-mixed.
    let layer = LinearConfig::new(4, 2).init::<B>(&device);
    assert_eq!(dtypes(&layer), vec![DType::BF16; 2]);
    assert_eq!(Tensor::<B, 2>::ones([3, 4], &device).dtype(), DType::BF16);

    // Through the Trainer: digits learns, and the trained weights are the f32 masters.
    let model = DigitsModel::<B>::new(&ModelConfig::default(), &device);
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    assert_eq!(dtypes(&out.model), vec![DType::F32; 6]);
    assert!(out.metrics["val_acc"] > 0.85, "{:?}", out.metrics);
}
