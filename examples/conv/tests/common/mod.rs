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

/// Where a fit stops early.
#[derive(Clone)]
enum Stop {
    /// A callback saves a checkpoint after this step and stops the fit.
    SaveAt(u64, PathBuf),
    /// `max_steps`: the fit ends there, and ModelCheckpoint writes its checkpoint.
    MaxSteps(u64),
}

/// What a fit did: its losses, its final float tensors, and the checkpoint it ended with.
type Fit = (Vec<(u64, u64)>, Vec<Vec<u8>>, Option<PathBuf>);

/// A 2-epoch fit (23 batches each) on accelerator `A` under `plan`.
fn run<A: Accelerator>(
    plan: &Plan,
    root: &Path,
    ckpt_path: Option<PathBuf>,
    stop: Option<Stop>,
) -> Fit {
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(2),
        max_steps: match &stop {
            Some(Stop::MaxSteps(n)) => Some(*n),
            _ => None,
        },
        log_every_n_steps: 1,
        enable_progress_bar: false,
        enable_model_summary: false,
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Losses::default();
    let stop_at = match stop {
        Some(Stop::SaveAt(step, path)) => Some((step, path)),
        _ => None,
    };
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
    (losses, float_bytes(&out.model), out.best_model_path)
}

/// Stops a fit in the middle of its second epoch (a callback saves at step 30), at the end of
/// its first (step 23), and by `max_steps` in the middle of the second (ModelCheckpoint's
/// checkpoint, written when the shortened epoch ends), resumes each, and compares with an
/// uninterrupted fit: the losses and every float tensor (weights, batch-norm statistics).
pub fn resumes_bitwise<A: Accelerator>(plan: &Plan) {
    let dir = tempfile::tempdir().unwrap();
    let (all, weights, _) = run::<A>(plan, dir.path(), None, None);
    assert_eq!(all.len(), 46, "2 epochs of 23 batches");
    let stops = [
        Stop::SaveAt(30, dir.path().join("step30.ckpt")),
        Stop::SaveAt(23, dir.path().join("step23.ckpt")),
        Stop::MaxSteps(30),
    ];
    for stop in stops {
        let (first, _, written) = run::<A>(plan, dir.path(), None, Some(stop.clone()));
        let (at, ckpt) = match stop {
            Stop::SaveAt(step, path) => (step, path),
            Stop::MaxSteps(step) => (step, written.expect("ModelCheckpoint wrote one")),
        };
        assert_eq!(first.len() as u64, at);
        let (rest, resumed_weights, _) = run::<A>(plan, dir.path(), Some(ckpt), None);
        assert_eq!(rest.first().map(|(step, _)| *step), Some(at + 1));
        let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
        assert!(
            joined == all,
            "{}, stopped at step {at}: the resumed fit's losses differ from the uninterrupted fit's",
            plan.precision
        );
        assert!(
            resumed_weights == weights,
            "{}, stopped at step {at}: the resumed fit's weights differ from the uninterrupted fit's",
            plan.precision
        );
    }
}
