//! `cargo xtask bench data [ROUNDS]`: the data path of the images example against
//! torchvision's, on a folder that `images prepare` writes (20,000 training PNGs of 32×32).
//!
//! 1. The loaders alone, each in a process of its own, alternating every round: ember's
//!    training loader (decode, random crop with padding, flip, to tensor, normalize, batches of
//!    128 stacked into tensors) with 0, 1 and 2 workers, and torchvision's `ImageFolder` with
//!    the same transforms in a `DataLoader` with 0 and 2 workers (samples per second of one
//!    epoch).
//! 2. The images fit (`images fit --trainer.profiler=simple`, 30 training batches) with 0 and 2
//!    workers: the share of the step spent waiting for data (`data fetch` over `data fetch` +
//!    `training batch`).
//!
//! 3. A fit streaming token shards (data/stream.rs) over a corpus of 64 MiB and one of 256 MiB,
//!    each in a process of its own: their peak RSS.
//!
//! The last line: `ember/torchvision loader: X.XXx (best workers each); data wait A% of the step
//! (0 workers B%); streaming peak RSS C MB at 1x, D MB at 4x`.
//!
//! `data loader ROOT WORKERS` and `data stream DIR` are ember contenders (used by the driver).

#[path = "data/stream.rs"]
mod stream;

// Shared with the benches that also time validation (`ValClock`), which this one does not.
#[allow(dead_code)]
#[path = "../../digits/benches/common/contest.rs"]
mod contest;

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use burn::prelude::*;
use burn_flex::{Flex, FlexDevice};
use contest::{python, run_contender};
use ember::Stack;
use ember::prelude::*;
use images::data::FolderData;
use images::prepare::{TRAIN_IMAGES, VAL_IMAGES, prepare};

/// One epoch of the images example's training loader with `workers` workers: the JSON report.
fn loader(root: &Path, workers: usize) -> anyhow::Result<String> {
    let data = FolderData {
        root: root.to_owned(),
        num_workers: workers,
        ..FolderData::default()
    };
    let train = data.train_loader()?.expect("a training loader");
    let start = Instant::now();
    let mut pass = train.pass(42, 0, 0..usize::MAX)?;
    let mut samples = 0;
    while let Some((_, (images, _))) =
        pass.next_batch::<Flex, (Tensor<Flex, 4>, Tensor<Flex, 1, Int>)>(&Stack, &FlexDevice)?
    {
        samples += images.dims()[0];
    }
    let seconds = start.elapsed().as_secs_f64();
    let per_s = samples as f64 / seconds;
    Ok(format!(
        r#"{{"samples": {samples}, "seconds": {seconds}, "samples_per_s": {per_s}}}"#
    ))
}

/// Samples per second of one contender's epoch.
fn contender(name: &str, command: Command) -> anyhow::Result<f64> {
    let (report, _, _) = run_contender(name, command)?;
    (report["samples_per_s"].as_f64()).ok_or_else(|| anyhow::anyhow!("{name}: no samples_per_s"))
}

/// The `total (s)` of the row `action` in a simple profiler's table.
fn profiled_seconds(table: &str, action: &str) -> anyhow::Result<f64> {
    let row = (table.lines())
        .find(|line| line.split('|').next().is_some_and(|a| a.trim() == action))
        .ok_or_else(|| anyhow::anyhow!("no `{action}` row in the profile:\n{table}"))?;
    let total = row.split('|').nth(3).unwrap_or_default().trim();
    Ok(total.parse()?)
}

/// The share of the step the images fit with `workers` workers spends waiting for data.
fn data_wait(root: &Path, workers: usize) -> anyhow::Result<f64> {
    let logs = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_images"))
        .args([
            "fit",
            &format!("--data.root={}", root.display()),
            &format!("--data.num_workers={workers}"),
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=30",
            "--trainer.limit_val_batches=0",
            "--trainer.profiler=simple",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
        ])
        .current_dir(logs.path())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(out.status.success(), "images fit failed: {stderr}");
    let fetch = profiled_seconds(&stderr, "data fetch")?;
    let step = profiled_seconds(&stderr, "training batch")?;
    Ok(fetch / (fetch + step))
}

fn drive(rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let start = Instant::now();
    prepare(root, TRAIN_IMAGES, VAL_IMAGES)?;
    println!(
        "wrote {TRAIN_IMAGES} + {VAL_IMAGES} PNGs in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let me = std::env::current_exe()?;
    let python = python("data")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/loader.py");
    let script = script.to_str().unwrap_or_default();
    // (name, program, its first argument, workers)
    let contenders = [
        ("ember w0", me.as_path(), "loader", "0"),
        ("ember w1", me.as_path(), "loader", "1"),
        ("ember w2", me.as_path(), "loader", "2"),
        ("torchvision w0", python.as_path(), script, "0"),
        ("torchvision w2", python.as_path(), script, "2"),
    ];
    let mut best = vec![0f64; contenders.len()];
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        for (k, &(name, program, first, workers)) in contenders.iter().enumerate() {
            let mut command = Command::new(program);
            command.arg(first).arg(root).arg(workers);
            command.env("RAYON_NUM_THREADS", "2");
            let per_s = contender(name, command)?;
            best[k] = best[k].max(per_s);
            line += &format!(" {name} {per_s:.0}/s,");
        }
        println!("{}", line.trim_end_matches(','));
    }
    let ember = best[..3].iter().copied().fold(0.0, f64::max);
    let torch = best[3..].iter().copied().fold(0.0, f64::max);
    let (waits_none, waits_two) = (data_wait(root, 0)?, data_wait(root, 2)?);
    println!(
        "images fit, 30 steps: data wait {:.1}% of the step with 0 workers, {:.1}% with 2",
        100.0 * waits_none,
        100.0 * waits_two
    );
    let (one, four) = (streaming(&me, 4)?, streaming(&me, 16)?);
    println!(
        "ember/torchvision loader: {:.2}x (best workers each); data wait {:.1}% of the step (0 workers {:.1}%); streaming peak RSS {:.1} MB at 1x, {:.1} MB at 4x",
        ember / torch,
        100.0 * waits_two,
        100.0 * waits_none,
        megabytes(one),
        megabytes(four)
    );
    Ok(())
}

/// The peak RSS of a fit streaming a corpus of `shards` shards, which it writes first.
fn streaming(me: &Path, shards: usize) -> anyhow::Result<u64> {
    let dir = tempfile::tempdir()?;
    stream::write_corpus(dir.path(), shards)?;
    let mut command = Command::new(me);
    command.arg("stream").arg(dir.path());
    let (report, _, peak_rss) = run_contender("ember stream", command)?;
    let bytes = stream::corpus_bytes(shards);
    println!(
        "streaming fit: corpus {} MiB ({:.1}x its peak RSS), {} windows in {:.1} s, peak RSS {:.1} MB",
        bytes >> 20,
        bytes as f64 / peak_rss as f64,
        report["windows"],
        report["seconds"].as_f64().unwrap_or_default(),
        megabytes(peak_rss)
    );
    Ok(peak_rss)
}

/// `bytes` in MiB.
fn megabytes(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let result = match args.first().map(String::as_str) {
        Some("loader") => match (args.get(1), args.get(2).and_then(|w| w.parse().ok())) {
            (Some(root), Some(workers)) => {
                loader(Path::new(root), workers).map(|r| println!("{r}"))
            }
            _ => Err(anyhow::anyhow!("usage: data loader ROOT WORKERS")),
        },
        Some("stream") => match args.get(1) {
            Some(dir) => stream::fit(Path::new(dir)).map(|r| println!("{r}")),
            None => Err(anyhow::anyhow!("usage: data stream DIR")),
        },
        Some(rounds) => match rounds.parse() {
            Ok(rounds) => drive(rounds),
            Err(_) => Err(anyhow::anyhow!(
                "usage: data [ROUNDS] (an integer, 3 by default)"
            )),
        },
        None => drive(3),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
