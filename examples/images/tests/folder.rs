//! The images example from a folder written by `images prepare`: fits with 0 and 2 data
//! workers end bitwise equal, a run stopped mid-epoch resumes with the same augmented batches,
//! and a file that does not decode stops the CLI with an error naming it (exit 1).

use std::path::{Path, PathBuf};
use std::process::Command;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::{Trainer, TrainerOptions};
use ember_acceptance::resume::{Losses, RecordLosses, flex_generator_turn, float_bytes};
use images::data::FolderData;
use images::model::{ResNet, ResNetConfig};
use images::prepare::prepare;

type B = Autodiff<Flex>;

/// A small folder: 96 training and 32 validation images.
fn folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path(), 96, 32).unwrap();
    dir
}

/// Two epochs of a narrow ResNet on `root` with `workers` data workers.
fn fit(
    root: &Path,
    workers: usize,
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u8>>) {
    let _turn = flex_generator_turn();
    let logs = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(5),
        max_epochs: Some(2),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        default_root_dir: logs.path().to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Losses::default();
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .unwrap()
        .with_callback(RecordLosses {
            seen: seen.clone(),
            stop_at,
        });
    let config = ResNetConfig {
        width: 4,
        ..ResNetConfig::default()
    };
    let model = ResNet::<B>::new(&config, trainer.device());
    let mut data = FolderData {
        root: root.to_owned(),
        batch_size: 16,
        num_workers: workers,
        ..FolderData::default()
    };
    let out = trainer.fit(model, &mut data).unwrap();
    let losses = seen.borrow().clone();
    (losses, float_bytes(&out.model))
}

#[test]
fn prepare_writes_one_folder_per_class() {
    let dir = folder();
    let classes = std::fs::read_dir(dir.path().join("train")).unwrap().count();
    assert_eq!(classes, 10);
    let count = |set: &str| {
        (std::fs::read_dir(dir.path().join(set)).unwrap())
            .map(|class| std::fs::read_dir(class.unwrap().path()).unwrap().count())
            .sum::<usize>()
    };
    assert_eq!((count("train"), count("val")), (96, 32));
}

#[test]
fn fits_with_and_without_workers_and_a_resumed_one_end_bitwise_equal() {
    let dir = folder();
    let (losses, weights) = fit(dir.path(), 0, None, None);
    assert_eq!(losses.len(), 12, "2 epochs of 6 batches");
    let (with_workers, their_weights) = fit(dir.path(), 2, None, None);
    assert!(with_workers == losses, "2 workers gave other losses");
    assert!(their_weights == weights, "2 workers gave other weights");

    // Stopped in the second epoch and resumed: the same augmented batches.
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = fit(dir.path(), 2, None, Some((8, ckpt.clone())));
    let (rest, resumed) = fit(dir.path(), 2, Some(ckpt), None);
    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(joined == losses, "the resumed run's losses differ");
    assert!(resumed == weights, "the resumed run's weights differ");
}

/// `images ARGS` run on cpu in `dir`.
fn images(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_images"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

#[test]
fn a_file_that_does_not_decode_stops_the_fit_naming_it() {
    let dir = folder();
    let bad = dir.path().join("train/3/99999.png");
    std::fs::write(&bad, b"\x89PNG not really").unwrap();
    let root = format!("--data.root={}", dir.path().display());
    let out = images(
        dir.path(),
        &[
            "fit",
            &root,
            "--data.num_workers=2",
            "--data.batch_size=16",
            "--model.width=4",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("99999.png") && stderr.contains("train loader could not make batch"),
        "{stderr}"
    );
    let out = images(dir.path(), &["fit", "--data.root=nowhere"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--data.root"), "{stderr}");
}

/// docs/data.md's augmentation pipeline, as the page shows it, on a prepared folder.
#[test]
fn the_manuals_augmentation_pipeline_builds_a_loader_of_the_folder() -> anyhow::Result<()> {
    use ember::Loader;
    let dir = folder();
    let root = dir.path();
    use ember::vision::{HorizontalFlip, ImageFolder, Normalize, RandomCrop, ToTensor, Transform};

    let augment = RandomCrop::new(32)
        .padding(4)
        .then(HorizontalFlip::new(0.5))
        .then(ToTensor)
        .then(Normalize::new([0.49, 0.48, 0.45], [0.25, 0.24, 0.26]));
    let train = Loader::from_source(ImageFolder::open(root.join("train"))?, 128)
        .map(move |(image, class), key| Ok((augment.apply(image, &mut key.rng())?, class)))
        .shuffled()
        .num_workers(2);
    // Items are (TensorData [3, 32, 32], i64): `type Batcher = Stack;` gives the model
    // `(Tensor<B, 4>, Tensor<B, 1, Int>)`.
    assert_eq!(train.num_batches(), 1);
    Ok(())
}
