//! ACCEPTANCE 29 for the conv example: a fit stopped mid-epoch and resumed from its
//! checkpoint continues with the same losses, bitwise, as an uninterrupted fit, and ends with
//! the same weights and batch-norm statistics. Dropout draws from the backend's generator, the
//! learning rate decays per epoch. Each precision is its own test binary: a process trains in
//! one float type per device.

use std::path::{Path, PathBuf};

use convnet::{ConvConfig, ConvNet};
use digits::data::DigitsData;
use digits::train::DataConfig;
use ember::{Accelerator, Plan, Trainer, TrainerOptions};
use ember_acceptance::resume::{Losses, RecordLosses, float_bytes};

/// Losses and final weights of a 2-epoch fit on accelerator `A` under `plan`.
fn run<A: Accelerator>(
    plan: &Plan,
    root: &Path,
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u8>>) {
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(2),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        enable_model_summary: false,
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Losses::default();
    let mut trainer = Trainer::<A::Backend>::new::<A>(plan, options)
        .unwrap()
        .with_callback(RecordLosses {
            seen: seen.clone(),
            stop_at,
        });
    let model = ConvNet::<A::Backend>::new(&ConvConfig::default(), trainer.device());
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    let losses = seen.borrow().clone();
    (losses, float_bytes(&out.model))
}

/// Stops a fit in the middle of its second epoch, resumes it, and compares with an
/// uninterrupted fit.
pub fn resumes_bitwise<A: Accelerator>(plan: &Plan) {
    let dir = tempfile::tempdir().unwrap();
    let (all, weights) = run::<A>(plan, dir.path(), None, None);
    assert_eq!(all.len(), 46, "2 epochs of 23 batches");

    // Step 30 = epoch 1, batch 6.
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = run::<A>(plan, dir.path(), None, Some((30, ckpt.clone())));
    assert_eq!(first.len(), 30);
    let (rest, resumed_weights) = run::<A>(plan, dir.path(), Some(ckpt), None);
    assert_eq!(rest.first().map(|(step, _)| *step), Some(31));

    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(
        joined == all,
        "{}: the resumed fit's losses differ from the uninterrupted fit's",
        plan.precision
    );
    assert!(
        resumed_weights == weights,
        "{}: the resumed fit's weights differ from the uninterrupted fit's",
        plan.precision
    );
}
