//! 16-mixed with dynamic loss scaling, on a test accelerator that declares 16-mixed over
//! burn-flex (the cpu accelerator runs 16-mixed as bf16-mixed and needs no scaler). Its own
//! test binary: a process trains in one float type per device.

use burn::module::Module;
use burn::nn::LinearConfig;
use burn::optim::GradientsParams;
use burn::tensor::{DType, Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_flex::Flex;
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::Trainer;
use ember::checkpoint::Checkpoint;
use ember::plugins::GradScaler;
use ember::{Plan, Precision, TrainerOptions};
use ember_acceptance::HalfCpu;

type B = Autodiff<Flex>;

fn plan() -> Plan {
    Plan::local("halfcpu", Precision::F16Mixed)
}

#[test]
fn sixteen_mixed_skips_overflowing_steps_grows_the_scale_and_saves_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(4),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        default_root_dir: dir.path().to_owned(),
        ..TrainerOptions::default()
    };
    let scaler = GradScaler {
        growth_interval: 20,
        ..GradScaler::default()
    };
    let mut trainer = Trainer::<B>::new::<HalfCpu>(&plan(), options)
        .unwrap()
        .with_grad_scaler(scaler);
    let device = *trainer.device();

    // An injected infinite gradient: unscaling reports it, the step is skipped, the scale halves.
    let layer = LinearConfig::new(4, 2).init::<B>(&device);
    let mut grads = GradientsParams::new();
    let inf = TensorData::new(
        vec![1.0f32, f32::INFINITY, 0.0, 2.0, 1.0, 1.0, 1.0, 1.0],
        [4, 2],
    );
    grads.register(
        layer.weight.id,
        Tensor::<Flex, 2>::from_data(inf, &device).cast(DType::F32),
    );
    let mut probe = GradScaler::default();
    let finite = probe.unscale::<B, _>(&layer, &mut grads);
    assert!(!finite);
    assert!(!probe.update(finite));
    assert_eq!((probe.scale, probe.skipped_steps), (32768.0, 1));

    // Through the Trainer: the first step overflows f16 at 2^16 (the scaled gradient of the
    // loss itself is 65536 > f16's 65504) and is skipped; the scale halves, grows back after
    // 20 good steps, overflows again, and so on.
    let model = DigitsModel::<B>::new(&ModelConfig::default(), &device);
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    let state = trainer.grad_scaler().unwrap().clone();
    // At 2^15 no step overflows, so every later skip means the scale grew back to 2^16.
    assert!(state.skipped_steps >= 2, "{state:?}");
    assert_eq!(state.scale, 32768.0, "{state:?}");
    assert!(out.metrics["val_acc"] > 0.8, "{:?}", out.metrics);
    assert!(out.metrics.contains_key("loss_scale"), "{:?}", out.metrics);
    let csv = std::fs::read_to_string(out.log_dir.unwrap().join("metrics.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("loss_scale"));

    // The scaler's state is in the checkpoint and comes back from it.
    let path = out.best_model_path.unwrap();
    let checkpoint = Checkpoint::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    assert_eq!(checkpoint.grad_scaler(&path).unwrap(), Some(state));
    let _ = out.model.into_record();
}
