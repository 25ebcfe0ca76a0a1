//! Data-parallel scaling on this machine: samples/s of 1 and 2 ddp ranks.
//!
//! `cargo xtask bench ddp [ROUNDS]`. The model is the digits MLP made wide (64-2048-2048-10,
//! 4.3 M parameters) with 512 samples per rank per step, so a step is compute-bound: about
//! 13 GFLOP against 17 MB of gradients to average (the ratio of the two is set by the batch:
//! both grow with the width). Every rank computes on one core
//! (`RAYON_NUM_THREADS=1`): the figure is how ddp scales with ranks, not how burn's kernels
//! scale with threads (one rank on two threads is printed beside it for reference). Each
//! measurement is a run of the digits binary (the 2-rank one through ember's mpirun
//! launcher); rounds alternate between the configurations. Samples/s counts training steps
//! only (rank 0's fit time, without process start-up). Beside them, two 1-rank runs at once
//! (two processes that do not communicate, their samples/s added up): what this machine's two
//! cores give two processes at all, the ceiling of ddp's scaling on it (shared caches, memory
//! bandwidth and clocks keep it below 2x). The last line is
//! `ddp scaling: X.XXx (two independent processes: Y.YYx)`, each the median over the median
//! 1-rank samples/s.

#[path = "common/rounds.rs"]
mod rounds;
#[path = "common/summary.rs"]
mod summary;
use rounds::{median, rounds};
use std::process::{Command, Stdio};

const BATCH: usize = 512;
// The digits training split (1437 images) gives each of 2 ranks one full batch of 512.
const STEPS_PER_EPOCH: usize = 1;
const EPOCHS: usize = 48;

/// The digits run that trains with `ranks` processes of `threads` compute threads each, in a
/// directory of its own.
fn command(ranks: usize, threads: usize) -> anyhow::Result<(Command, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_digits"));
    cmd.args([
        "fit",
        "--trainer.strategy=ddp",
        &format!("--trainer.devices={ranks}"),
        &format!("--trainer.max_epochs={EPOCHS}"),
        &format!("--trainer.limit_train_batches={STEPS_PER_EPOCH}"),
        "--trainer.limit_val_batches=0",
        "--trainer.num_sanity_val_steps=0",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=false",
        "--trainer.seed=1",
        "--model.hidden=[2048, 2048]",
        &format!("--data.batch_size={BATCH}"),
    ])
    .current_dir(dir.path())
    .env("RAYON_NUM_THREADS", threads.to_string())
    .env("EMBER_INVENTORY", "");
    Ok((cmd, dir))
}

/// Samples/s of a finished run of `ranks` ranks.
fn samples_per_second(ranks: usize, out: std::process::Output) -> anyhow::Result<f64> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "{ranks} rank(s) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seconds = summary::fit_seconds(&stdout)?;
    Ok((ranks * BATCH * STEPS_PER_EPOCH * EPOCHS) as f64 / seconds)
}

/// Trains with `ranks` processes of `threads` compute threads each; returns samples/s.
fn measure(ranks: usize, threads: usize) -> anyhow::Result<f64> {
    let (mut cmd, _dir) = command(ranks, threads)?;
    samples_per_second(ranks, cmd.output()?)
}

/// Two 1-rank runs of one thread started together; returns their samples/s added up.
fn measure_independent() -> anyhow::Result<f64> {
    let (mut first, _first_dir) = command(1, 1)?;
    let (mut second, _second_dir) = command(1, 1)?;
    let piped = |cmd: &mut Command| cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let (first, second) = (piped(&mut first)?, piped(&mut second)?);
    Ok(samples_per_second(1, first.wait_with_output()?)?
        + samples_per_second(1, second.wait_with_output()?)?)
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(5);
    let names = [
        "1 rank x 1 thread",
        "2 ranks x 1 thread",
        "1 rank x 2 threads",
        "two independent 1-rank runs",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        // Alternate the order so that neither configuration always runs first.
        let order = if round % 2 == 0 {
            [0, 1, 2, 3]
        } else {
            [1, 0, 3, 2]
        };
        for i in order {
            let x = match i {
                0 => measure(1, 1)?,
                1 => measure(2, 1)?,
                2 => measure(1, 2)?,
                _ => measure_independent()?,
            };
            results[i].push(x);
            line.push_str(&format!("  {} {x:.0} samples/s", names[i]));
        }
        println!("{line}");
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    println!(
        "median samples/s: 1 rank {:.0}, 2 ranks {:.0} (1 thread per rank); 1 rank on 2 threads {:.0}; two independent 1-rank runs {:.0}",
        medians[0], medians[1], medians[2], medians[3]
    );
    println!(
        "ddp scaling: {:.2}x (two independent processes: {:.2}x)",
        medians[1] / medians[0],
        medians[3] / medians[0]
    );
    Ok(())
}
