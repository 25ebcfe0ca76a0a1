//! Memory and speed of `ddp_sharded` against `ddp`: 2 ranks training a wide MLP.
//!
//! `cargo xtask bench sharded [ROUNDS]`. The model is `wide_adam` made wide: 256 inputs, five
//! hidden layers of 2048, 8 classes (17.3 M parameters, 69 MB in f32; Adam keeps two moments
//! per weight, 138 MB more under ddp), batch 64, one epoch of 16 steps per rank. Every rank
//! computes on one core (`RAYON_NUM_THREADS=1`). Each measurement is a run of the binary
//! through ember's mpirun launcher; rounds alternate between the strategies. It prints, per
//! strategy: samples/s of the training steps (rank 0's fit time, without start-up), the
//! optimizer-state bytes of the rank holding most (each rank reports its own at the end of
//! fit), and the peak RSS of the largest process of the run (`wait4`'s `ru_maxrss`, which
//! covers the launcher, mpirun and the ranks). The last line gives the ratios sharded/ddp of
//! the per-rank optimizer-state bytes and of samples/s.

use std::process::Command;

use ember_acceptance::process::run_measured;

#[path = "../../examples/digits/benches/common/rounds.rs"]
mod rounds;
use rounds::{median, rounds};

const BATCH: usize = 64;
const SAMPLES: usize = 2048;
const RANKS: usize = 2;

/// What one run measured.
struct Measured {
    samples_per_s: f64,
    /// Optimizer-state bytes of the rank holding most.
    state_bytes: u64,
    /// Peak RSS of the largest process, in bytes.
    peak_rss: u64,
}

fn measure(strategy: &str) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir()?;
    let mut command = Command::new(env!("CARGO_BIN_EXE_wide_adam"));
    command
        .args([
            "fit",
            &format!("--trainer.strategy={strategy}"),
            &format!("--trainer.devices={RANKS}"),
            "--trainer.max_epochs=1",
            "--trainer.limit_val_batches=0",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.logger=false",
            "--model.inputs=256",
            "--model.hidden=[2048, 2048, 2048, 2048, 2048]",
            "--data.inputs=256",
            &format!("--data.samples={SAMPLES}"),
            &format!("--data.batch_size={BATCH}"),
        ])
        .current_dir(dir.path())
        .env("RAYON_NUM_THREADS", "1")
        .env("RUST_LOG", "ember=info")
        .env("EMBER_INVENTORY", "");
    let (stdout, stderr, peak_rss) = run_measured(command)?;
    // "trained N steps in S s (...)"
    let mut words = stdout.split("trained ").nth(1).unwrap_or("").split(' ');
    let steps: f64 = words
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    let seconds: f64 = words
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN);
    anyhow::ensure!(seconds.is_finite(), "no timing in {stdout:?}");
    // "rank R: optimizer state for K of N parameters, B bytes"
    let state_bytes = stderr
        .lines()
        .filter(|l| l.contains(": optimizer state for "))
        .filter_map(|l| l.rsplit(", ").next()?.strip_suffix(" bytes")?.parse().ok())
        .max()
        .ok_or_else(|| anyhow::anyhow!("no optimizer state reported: {stderr}"))?;
    Ok(Measured {
        samples_per_s: steps * (BATCH * RANKS) as f64 / seconds,
        state_bytes,
        peak_rss,
    })
}

fn main() -> anyhow::Result<()> {
    let strategies = ["ddp", "ddp_sharded"];
    let mut results: Vec<Vec<Measured>> = vec![Vec::new(), Vec::new()];
    for round in 0..rounds(3) {
        let mut line = format!("round {round}:");
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let m = measure(strategies[i])?;
            line.push_str(&format!(
                "  {} {:.0} samples/s, state {:.1} MB/rank, peak RSS {:.0} MB",
                strategies[i],
                m.samples_per_s,
                m.state_bytes as f64 / 1e6,
                m.peak_rss as f64 / 1e6
            ));
            results[i].push(m);
        }
        println!("{line}");
    }
    let summary: Vec<(f64, f64, f64)> = results
        .iter()
        .map(|runs| {
            let of = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
            (
                of(|m| m.samples_per_s),
                of(|m| m.state_bytes as f64),
                of(|m| m.peak_rss as f64),
            )
        })
        .collect();
    for (name, (speed, state, rss)) in strategies.iter().zip(&summary) {
        println!(
            "{name}: median {speed:.0} samples/s, optimizer state {:.1} MB per rank, peak RSS {:.0} MB per rank",
            state / 1e6,
            rss / 1e6
        );
    }
    let (ddp, sharded) = (summary[0], summary[1]);
    println!(
        "sharded/ddp: optimizer state per rank {:.2}x, samples/s {:.2}x",
        sharded.1 / ddp.1,
        sharded.0 / ddp.0
    );
    Ok(())
}
