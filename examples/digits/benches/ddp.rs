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
//! only (rank 0's fit time, without process start-up). The last line is
//! `ddp scaling: X.XXx` (median 2-rank samples/s over median 1-rank samples/s).

#[path = "common/rounds.rs"]
mod rounds;
#[path = "common/summary.rs"]
mod summary;
use rounds::{median, rounds};
use std::process::Command;

const BATCH: usize = 512;
// The digits training split (1437 images) gives each of 2 ranks one full batch of 512.
const STEPS_PER_EPOCH: usize = 1;
const EPOCHS: usize = 16;

/// Trains with `ranks` processes of `threads` compute threads each; returns samples/s.
fn measure(ranks: usize, threads: usize) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
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
        .env("EMBER_INVENTORY", "")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "{ranks} rank(s) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seconds = summary::fit_seconds(&stdout)?;
    Ok((ranks * BATCH * STEPS_PER_EPOCH * EPOCHS) as f64 / seconds)
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(5);
    let configs = [(1, 1), (2, 1), (1, 2)];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        // Alternate the order so that neither configuration always runs first.
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![1, 0, 2]
        };
        for i in order {
            let (ranks, threads) = configs[i];
            let x = measure(ranks, threads)?;
            results[i].push(x);
            line.push_str(&format!(
                "  {ranks} rank(s) x {threads} thread(s) {x:.0} samples/s"
            ));
        }
        println!("{line}");
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    println!(
        "median samples/s: 1 rank {:.0}, 2 ranks {:.0} (1 thread per rank); 1 rank on 2 threads {:.0}",
        medians[0], medians[1], medians[2]
    );
    println!("ddp scaling: {:.2}x", medians[1] / medians[0]);
    Ok(())
}
