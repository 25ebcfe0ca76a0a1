//! Data workers change when batches are made, never what they hold: fits with 0, 1, 2 and 4
//! workers (`--data.num_workers`) end bitwise equal, and a run stopped mid-epoch with workers
//! resumes like the uninterrupted run without them.

use std::path::{Path, PathBuf};

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::{Trainer, TrainerOptions};
use ember_acceptance::resume::{Losses, RecordLosses, flex_generator_turn, float_bytes};

type B = Autodiff<Flex>;

/// Two epochs with validation on `workers` data workers: the step losses and the weights.
fn fit(
    workers: usize,
    root: &Path,
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u8>>) {
    let options = TrainerOptions {
        seed: Some(7),
        max_epochs: Some(2),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let _turn = flex_generator_turn();
    let seen = Losses::default();
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .unwrap()
        .with_callback(RecordLosses {
            seen: seen.clone(),
            stop_at,
        });
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let config = DataConfig {
        num_workers: workers,
        ..DataConfig::default()
    };
    let out = trainer.fit(model, &mut DigitsData::new(config)).unwrap();
    let losses = seen.borrow().clone();
    (losses, float_bytes(&out.model))
}

#[test]
fn fits_with_any_number_of_workers_end_bitwise_equal() {
    let dir = tempfile::tempdir().unwrap();
    let (losses, weights) = fit(0, dir.path(), None, None);
    assert_eq!(losses.len(), 46, "2 epochs of 23 batches");
    for workers in [1, 2, 4] {
        let (other_losses, other_weights) = fit(workers, dir.path(), None, None);
        let first = (0..losses.len()).find(|&i| other_losses.get(i) != losses.get(i));
        assert!(
            other_losses == losses,
            "{workers} workers: other losses from {first:?}: {:?} vs {:?}",
            first.map(|i| &losses[i..losses.len().min(i + 3)]),
            first.map(|i| &other_losses[i..other_losses.len().min(i + 3)])
        );
        assert!(other_weights == weights, "{workers} workers: other weights");
    }
}

#[test]
fn a_run_with_workers_resumes_mid_epoch_like_the_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let (all, weights) = fit(0, dir.path(), None, None);
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = fit(2, dir.path(), None, Some((30, ckpt.clone())));
    assert_eq!(first.len(), 30);
    let (rest, resumed_weights) = fit(2, dir.path(), Some(ckpt), None);
    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(joined == all, "the resumed run's losses differ");
    assert!(
        resumed_weights == weights,
        "the resumed run's weights differ"
    );
}
