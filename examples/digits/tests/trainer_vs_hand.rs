//! ACCEPTANCE 27: with a fixed seed, fit through the Trainer gives bitwise the same weights as
//! the hand-written burn loop over the same batches, on the same backend (burn-flex; LibTorch's
//! CPU with the `tch` feature).

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Device, Tensor};
use burn_flex::FlexDevice;
use digits::data::DigitsData;
use digits::model::{DigitsModel, Mlp, ModelConfig};
use digits::train::{DataConfig, fit_by_hand};
use ember::TrainerOptions;
use ember::{Accelerator, Trainer};

/// Every float parameter's bits, in module order.
struct Bits(Vec<Vec<u32>>);

impl<B: Backend> ModuleVisitor<B> for Bits {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let values = param.val().into_data().to_vec::<f32>().unwrap();
        self.0.push(values.iter().map(|v| v.to_bits()).collect());
    }
}

fn bits<B: Backend>(model: &Mlp<B>) -> Vec<Vec<u32>> {
    let mut visitor = Bits(Vec::new());
    model.visit(&mut visitor);
    visitor.0
}

/// Fits 3 epochs through the Trainer (on accelerator `A`) and by hand on `device` and compares
/// the weights' bits.
fn trainer_equals_hand_loop<A: Accelerator>(device: Device<A::Backend>) {
    let model_config = ModelConfig::default();
    let data_config = DataConfig::default();
    let epochs = 3;
    let (hand, report) =
        fit_by_hand::<A::Backend>(&device, &model_config, &data_config, epochs, |_, _| {}).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(data_config.seed),
        max_epochs: Some(epochs as u64),
        enable_progress_bar: false,
        default_root_dir: dir.path().to_owned(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<A::Backend>::on_accelerator::<A>(device, options).unwrap();
    let model = DigitsModel::<A::Backend>::new(&model_config, trainer.device());
    let out = trainer
        .fit(model, &mut DigitsData::new(data_config))
        .unwrap();

    assert_eq!(out.global_step as usize, report.steps);
    let (ours, theirs) = (bits(&out.model.mlp), bits(&hand));
    assert_eq!(ours.len(), 6, "three layers, weight and bias each");
    assert!(
        ours == theirs,
        "the Trainer's weights differ from the hand loop's"
    );
    let val_acc = out.metrics["val_acc"];
    assert!(
        (val_acc - report.val_accuracy[epochs - 1]).abs() < 1e-9,
        "val_acc {val_acc} vs the hand loop's {:?}",
        report.val_accuracy
    );
}

#[test]
fn trainer_and_hand_loop_give_bitwise_equal_weights() {
    trainer_equals_hand_loop::<ember::cpu::CpuAccelerator>(FlexDevice);
}

#[cfg(feature = "tch")]
#[test]
fn trainer_and_hand_loop_give_bitwise_equal_weights_on_libtorch() {
    use ember::tch::TchCpuAccelerator;
    // The devices as the Trainer gets them for tch-cpu (LibTorch's threads set once).
    let device = TchCpuAccelerator::parallel_devices(&[0]).remove(0);
    trainer_equals_hand_loop::<TchCpuAccelerator>(device);
}

/// ACCEPTANCE 27 on a GPU (scripts/gpu-check.sh runs it there): the same ops in the same
/// order on the same device, so bitwise equality is expected unless cuda's kernels are not
/// repeatable from one call to the next.
#[cfg(feature = "cuda")]
#[test]
fn trainer_and_hand_loop_give_bitwise_equal_weights_on_cuda() {
    use ember::cuda::CudaAccelerator;
    if !CudaAccelerator::is_available() {
        eprintln!("skip: no CUDA device here (scripts/gpu-check.sh runs this on a GPU machine)");
        return;
    }
    let device = CudaAccelerator::parallel_devices(&[0]).remove(0);
    trainer_equals_hand_loop::<CudaAccelerator>(device);
}

/// ACCEPTANCE 27 on xla (XLA's CPU plugin here): the Trainer and the hand loop record the same
/// ops, so they cut the same segments and run the same compiled programs.
#[cfg(feature = "tpu-xla")]
#[test]
fn trainer_and_hand_loop_give_bitwise_equal_weights_on_xla() {
    use ember::xla::XlaAccelerator;
    if !XlaAccelerator::is_available() {
        eprintln!("skip: no PJRT plugin (scripts/setup.sh caches XLA's CPU plugin)");
        return;
    }
    let device = XlaAccelerator::parallel_devices(&[0]).remove(0);
    trainer_equals_hand_loop::<XlaAccelerator>(device);
}
