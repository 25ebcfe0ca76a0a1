//! 64-true on cpu: the model is built and trained in f64. (Its own test binary: a process
//! trains in one float type per device.)

use burn::tensor::DType;
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::checkpoint::Checkpoint;
use ember::cpu::CpuAccelerator;
use ember::{Plan, Precision, Trainer, TrainerOptions};

mod common;

use common::dtypes;

type B = <CpuAccelerator as ember::Accelerator>::Backend;

#[test]
fn sixty_four_true_builds_and_trains_in_f64() {
    let plan = Plan::local("cpu", Precision::F64True);
    let dir = tempfile::tempdir().unwrap();
    let options = common::three_epochs(dir.path());
    let mut trainer = Trainer::<B>::new::<CpuAccelerator>(&plan, options).unwrap();
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    assert_eq!(dtypes(&model), vec![DType::F64; 6]);
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    assert_eq!(
        dtypes(&out.model),
        vec![DType::F64; 6],
        "still f64 after Adam steps"
    );
    assert!(out.metrics["val_acc"] > 0.85, "{:?}", out.metrics);

    // The checkpoint keeps the weights in f64, and they load back into an f64 model.
    let path = out.best_model_path.expect("a checkpoint was written");
    let checkpoint = Checkpoint::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    assert!(
        checkpoint.weights.values().all(|w| w.dtype == DType::F64),
        "{:?}",
        checkpoint
            .weights
            .values()
            .map(|w| w.dtype)
            .collect::<Vec<_>>()
    );
    let fresh = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let loaded = checkpoint.load_model(fresh, &path).unwrap();
    assert_eq!(dtypes(&loaded), vec![DType::F64; 6]);

    // A second float type in the same process is refused, not applied silently.
    let mut f32_plan = plan.clone();
    f32_plan.precision = Precision::F32True;
    let e = Trainer::<B>::new::<CpuAccelerator>(&f32_plan, TrainerOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("32-true") && e.contains("F64"), "{e}");
}
