//! The `ddp_sharded` strategy on OpenMPI (2 cpu ranks): it ends bitwise where `ddp` ends (Adam
//! and SGD with momentum, with and without clipping and accumulation) while each rank holds
//! only its own parameters' optimizer state; a fit cut short resumes bitwise, under
//! `ddp_sharded` or `ddp` (its checkpoints hold the whole state).

// The ranks train on cpu whatever backend the suite is built with: the matrix's cpu row runs
// these tests, and a backend row (built with that backend's feature) would only repeat them.
#![cfg(not(any(
    feature = "cuda",
    feature = "wgpu",
    feature = "tch",
    feature = "tpu-xla"
)))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ember_acceptance::{checkpoints, mpirun_available};

fn run(exe: &str, dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(exe)
        .args([
            "fit",
            "--trainer.devices=2",
            "--trainer.enable_progress_bar=false",
        ])
        .args(["--trainer.enable_model_summary=false"])
        .args(args)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1")
        .env("RUST_LOG", "ember=info")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{exe} {args:?}: {stderr}");
    out
}

/// The newest checkpoint of run `version`.
fn checkpoint(dir: &Path, version: usize) -> PathBuf {
    checkpoints::newest(&dir.join(format!("lightning_logs/version_{version}/checkpoints")))
}

/// Every tensor of a checkpoint by name (see [`checkpoints::tensors`]), as bytes.
fn tensors(path: &Path) -> BTreeMap<String, Vec<u8>> {
    (checkpoints::tensors(path).into_iter())
        .map(|(name, data)| (name, data.as_bytes().to_vec()))
        .collect()
}

/// Each rank's "optimizer state for K of N parameters, B bytes" line: (K, N, B) by rank.
fn held(out: &Output) -> BTreeMap<usize, (usize, usize, u64)> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut held = BTreeMap::new();
    for line in stderr.lines() {
        let Some((_, rest)) = line.split_once(" rank ") else {
            continue;
        };
        let Some((rank, rest)) = rest.split_once(": optimizer state for ") else {
            continue;
        };
        let words: Vec<&str> = rest.split([' ', ',']).collect();
        // "K of N parameters, B bytes"
        let number = |i: usize| words[i].parse::<u64>().unwrap();
        let entry = (number(0) as usize, number(2) as usize, number(5));
        held.insert(rank.parse().unwrap(), entry);
    }
    held
}

#[test]
fn ddp_sharded_ends_bitwise_where_ddp_ends_holding_half_the_state() {
    if !mpirun_available() {
        return;
    }
    let adam = env!("CARGO_BIN_EXE_wide_adam");
    let sgd = env!("CARGO_BIN_EXE_wide_sgd");
    let clip_accumulate = [
        "--trainer.gradient_clip_val=0.05",
        "--trainer.accumulate_grad_batches=2",
    ];
    for (exe, extra) in [
        (adam, &[][..]),
        (adam, &clip_accumulate[..]),
        (sgd, &["--model.lr=0.05"][..]),
        (
            sgd,
            &[&["--model.lr=0.05"][..], &clip_accumulate[..]].concat()[..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let with = |strategy: &str| {
            let flag = format!("--trainer.strategy={strategy}");
            let args: Vec<&str> = extra.iter().copied().chain([flag.as_str()]).collect();
            run(exe, dir.path(), &args)
        };
        let ddp = with("ddp");
        let sharded = with("ddp_sharded");
        let (ddp_ckpt, sharded_ckpt) = (checkpoint(dir.path(), 0), checkpoint(dir.path(), 1));
        let what = format!("{} {extra:?}", Path::new(exe).display());
        assert!(
            tensors(&ddp_ckpt) == tensors(&sharded_ckpt),
            "{what}: ddp_sharded's weights or gathered optimizer state differ from ddp's"
        );
        // Under ddp every rank holds the whole state; under ddp_sharded the ranks' parts are
        // disjoint (the strategy fails the fit otherwise) and make up the whole.
        let (whole, parts) = (held(&ddp), held(&sharded));
        assert_eq!(whole.len(), 2, "{what}: {whole:?}");
        assert_eq!(whole[&0], whole[&1], "{what}");
        let (n, total) = (whole[&0].1, whole[&0].2);
        assert_eq!(
            whole[&0].0, n,
            "{what}: ddp holds state for every parameter"
        );
        assert_eq!(parts.len(), 2, "{what}: {parts:?}");
        assert_eq!(parts[&0].0 + parts[&1].0, n, "{what}: {parts:?}");
        assert_eq!(parts[&0].2 + parts[&1].2, total, "{what}: {parts:?}");
        assert!(parts.values().all(|p| p.2 < total), "{what}: {parts:?}");
    }
}

#[test]
fn a_sharded_fit_cut_short_resumes_bitwise_under_either_strategy() {
    if !mpirun_available() {
        return;
    }
    let exe = env!("CARGO_BIN_EXE_wide_adam");
    let dir = tempfile::tempdir().unwrap();
    let fit = |extra: &[&str]| {
        let args = [&["--trainer.max_epochs=3"], extra].concat();
        run(exe, dir.path(), &args);
    };
    fit(&["--trainer.strategy=ddp_sharded"]);
    // 8 steps an epoch: the cut is in the middle of the second.
    fit(&["--trainer.strategy=ddp_sharded", "--trainer.max_steps=11"]);
    let written = checkpoint(dir.path(), 1);
    assert!(
        written.ends_with("epoch=1-step=11.ckpt"),
        "{}",
        written.display()
    );
    // A resumed ModelCheckpoint removes the checkpoint it kept when it saves a better one.
    let cut = dir.path().join("cut.ckpt");
    std::fs::copy(&written, &cut).unwrap();
    let resume = format!("--trainer.ckpt_path={}", cut.display());
    fit(&["--trainer.strategy=ddp_sharded", &resume]);
    fit(&["--trainer.strategy=ddp", &resume]);
    let uninterrupted = tensors(&checkpoint(dir.path(), 0));
    assert!(
        tensors(&checkpoint(dir.path(), 2)) == uninterrupted,
        "the resumed ddp_sharded fit ends with other weights or optimizer state"
    );
    assert!(
        tensors(&checkpoint(dir.path(), 3)) == uninterrupted,
        "ddp resumed from a ddp_sharded checkpoint ends elsewhere"
    );
    // One process reads the gathered state too (its batches differ: no bitwise claim).
    let one = Command::new(exe)
        .args([
            "fit",
            "--trainer.max_epochs=3",
            "--trainer.logger=false",
            &resume,
        ])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
}
