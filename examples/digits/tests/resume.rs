//! ACCEPTANCE 29: a run stopped mid-epoch and resumed from its checkpoint continues with the
//! same losses, bitwise, as an uninterrupted run, and ends with the same weights (burn-flex;
//! LibTorch's CPU with the `tch` feature; xla with `tpu-xla`).

use std::path::{Path, PathBuf};

use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::{Trainer, TrainerOptions};
use ember_acceptance::resume::{Losses, RecordLosses, float_bytes};

fn run<B: AutodiffBackend>(
    device: &B::Device,
    root: &Path,
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u8>>) {
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(3),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Losses::default();
    let mut trainer = Trainer::<B>::on_device(device.clone(), options)
        .unwrap()
        .with_callback(RecordLosses {
            seen: seen.clone(),
            stop_at,
        });
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    let losses = seen.borrow().clone();
    (losses, float_bytes(&out.model))
}

/// Runs 3 epochs, then the same stopped at step 30 and resumed, and compares them.
fn resumed_equals_uninterrupted<B: AutodiffBackend>(device: B::Device) {
    let fit = |root: &Path, ckpt, stop_at| run::<B>(&device, root, ckpt, stop_at);
    let dir = tempfile::tempdir().unwrap();
    let (all, weights) = fit(dir.path(), None, None);
    assert_eq!(all.len(), 69, "3 epochs of 23 batches");

    // Stop in the middle of the second epoch (step 30 = epoch 1, batch 7), then resume.
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = fit(dir.path(), None, Some((30, ckpt.clone())));
    assert_eq!(first.len(), 30);
    let (rest, resumed_weights) = fit(dir.path(), Some(ckpt), None);
    assert_eq!(rest.first().map(|(step, _)| *step), Some(31));

    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(
        joined == all,
        "the resumed run's losses differ from the uninterrupted run's"
    );
    assert!(
        resumed_weights == weights,
        "the resumed run's weights differ from the uninterrupted run's"
    );
}

#[test]
fn a_resumed_run_continues_bitwise_like_an_uninterrupted_one() {
    resumed_equals_uninterrupted::<Autodiff<Flex>>(FlexDevice);
}

#[cfg(feature = "tch")]
#[test]
fn a_resumed_run_continues_bitwise_like_an_uninterrupted_one_on_libtorch() {
    use ember::Accelerator;
    use ember::tch::TchCpuAccelerator;
    let device = TchCpuAccelerator::parallel_devices(&[0]).remove(0);
    resumed_equals_uninterrupted::<<TchCpuAccelerator as Accelerator>::Backend>(device);
}

/// ACCEPTANCE 29 on a GPU (scripts/gpu-check.sh runs it there).
#[cfg(feature = "cuda")]
#[test]
fn a_resumed_run_continues_bitwise_like_an_uninterrupted_one_on_cuda() {
    use ember::Accelerator;
    use ember::cuda::CudaAccelerator;
    if !CudaAccelerator::is_available() {
        eprintln!("skip: no CUDA device here (scripts/gpu-check.sh runs this on a GPU machine)");
        return;
    }
    let device = CudaAccelerator::parallel_devices(&[0]).remove(0);
    resumed_equals_uninterrupted::<<CudaAccelerator as Accelerator>::Backend>(device);
}

/// ACCEPTANCE 29 on xla (XLA's CPU plugin here): the checkpoint is read back through the host
/// and the resumed run continues bitwise.
#[cfg(feature = "tpu-xla")]
#[test]
fn a_resumed_run_continues_bitwise_like_an_uninterrupted_one_on_xla() {
    use ember::Accelerator;
    use ember::xla::XlaAccelerator;
    if !XlaAccelerator::is_available() {
        eprintln!("skip: no PJRT plugin (scripts/setup.sh caches XLA's CPU plugin)");
        return;
    }
    let device = XlaAccelerator::parallel_devices(&[0]).remove(0);
    resumed_equals_uninterrupted::<<XlaAccelerator as Accelerator>::Backend>(device);
}
