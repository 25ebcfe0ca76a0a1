//! The GAN example end to end (issue: manual optimization): it trains, writing a PNG grid of
//! made digits per epoch; a fit stopped after two epochs and resumed from its checkpoint ends
//! with the weights of the uninterrupted fit, bitwise (both Adams' states and the per-batch
//! noise come back); and two ranks train it under ddp.

use std::path::Path;
use std::process::Output;

use ember::checkpoint::Checkpoint;
use ember_acceptance::{mpirun_available, reported, run_cpu_only};

const QUIET: [&str; 2] = [
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
];

fn gan(dir: &Path, args: &[&str]) -> Output {
    let args = [&["fit"], &QUIET[..], args].concat();
    let out = run_cpu_only(env!("CARGO_BIN_EXE_gan"), dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gan {args:?}: {stderr}");
    out
}

/// The float weights of a run's `last.ckpt`, by name.
fn last_weights(dir: &Path, version: usize) -> Vec<(String, Vec<u8>)> {
    let path = dir.join(format!(
        "lightning_logs/version_{version}/checkpoints/last.ckpt"
    ));
    let checkpoint = Checkpoint::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    let mut weights: Vec<_> = (checkpoint.weights.into_iter())
        .map(|(name, data)| (name, data.as_bytes().to_vec()))
        .collect();
    weights.sort();
    weights
}

#[test]
fn it_trains_and_draws_a_grid_each_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let out = gan(dir.path(), &["--trainer.max_epochs=2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for metric in ["d_loss", "g_loss", "val_real_score", "val_made_score"] {
        let value = reported(&stdout, metric).unwrap_or_else(|| panic!("{metric}: {stdout}"));
        assert!(value.is_finite(), "{metric} {value}");
    }
    // Two optimizer steps per batch: 1,437 training images in batches of 64 are 23 batches.
    assert!(stdout.starts_with("trained 92 steps"), "{stdout}");
    for epoch in 0..2 {
        let png = dir.path().join(format!(
            "lightning_logs/version_0/samples/epoch={epoch}.png"
        ));
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // 256 x 256: 4 x 4 digits of 8 x 8 pixels, 8 screen pixels each.
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 256);
    }
}

#[test]
fn a_stopped_fit_resumes_bitwise() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints =
        "--trainer.callbacks=[{class_path: ModelCheckpoint, init_args: {save_last: true}}]";
    gan(dir.path(), &["--trainer.max_epochs=3", checkpoints]);
    gan(dir.path(), &["--trainer.max_epochs=2", checkpoints]);
    let resume = "--trainer.ckpt_path=lightning_logs/version_1/checkpoints/last.ckpt";
    gan(dir.path(), &["--trainer.max_epochs=3", checkpoints, resume]);
    assert_eq!(last_weights(dir.path(), 2), last_weights(dir.path(), 0));
}

#[test]
fn two_ranks_train_it() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = gan(
        dir.path(),
        &["--trainer.devices=2", "--trainer.max_epochs=1"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(2 processes)"), "{stdout}");
    assert!(
        reported(&stdout, "g_loss").is_some_and(f64::is_finite),
        "{stdout}"
    );
}

#[test]
fn the_docs_snippets_on_manual_optimization_are_taken_from_this_example() {
    ember_acceptance::docs::assert_snippets_in(
        include_str!("../../../docs/trainer.md"),
        "## Manual optimization and several optimizers",
        include_str!("../src/lib.rs"),
        2,
    );
}
