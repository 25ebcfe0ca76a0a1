//! One process driving XLA's 4 CPU devices as one SPMD program (`--trainer.strategy=xla`)
//! against 4 ddp processes on the same plugin, one device each (gradients averaged through
//! OpenMPI): samples/s on the digits MLP and on a wide one.
//!
//! `cargo xtask bench xla-devices [ROUNDS]`. Both take 64 items per device per step (256 a
//! step) and see every training item once an epoch; each measurement is a run of the digits
//! binary on the plugin's 4 devices, rounds alternating which strategy runs first. Samples/s
//! counts training only (the fit time the summary line reports, without start-up), and the
//! plugin's own thread pools are left as they are for both. The last line is
//! `xla/ddp on 4 devices: digits X.XXx, wide X.XXx` (median samples/s of one process over
//! those of four).

#[path = "common/rounds.rs"]
mod rounds;
#[path = "common/summary.rs"]
mod summary;
use rounds::{median, rounds};
use std::process::Command;

/// Items in the digits training split: each epoch's samples, under either strategy.
const TRAIN_ITEMS: usize = 1437;
const EPOCHS: usize = 10;

/// A model to train: its name and its `--model.hidden`.
struct Workload {
    name: &'static str,
    hidden: &'static str,
}

const WORKLOADS: [Workload; 2] = [
    Workload {
        name: "digits",
        hidden: "[256, 256]",
    },
    Workload {
        name: "wide",
        hidden: "[1024, 1024]",
    },
];

/// Trains `work` under `strategy` on the plugin's 4 devices; returns samples/s.
fn measure(work: &Workload, strategy: &str) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.accelerator=xla",
            "--trainer.devices=4",
            &format!("--trainer.strategy={strategy}"),
            &format!("--trainer.max_epochs={EPOCHS}"),
            "--trainer.limit_val_batches=0",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.logger=false",
            "--trainer.seed=1",
            &format!("--model.hidden={}", work.hidden),
        ])
        .current_dir(dir.path())
        .env_remove("EMBER_INVENTORY")
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "{} under {strategy} failed: {}",
        work.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let seconds = summary::fit_seconds(&stdout)?;
    Ok((TRAIN_ITEMS * EPOCHS) as f64 / seconds)
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(3);
    let strategies = ["xla", "ddp"];
    let mut ratios = Vec::new();
    for work in &WORKLOADS {
        println!(
            "{} (--model.hidden={}), {EPOCHS} epochs:",
            work.name, work.hidden
        );
        let mut results = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let mut line = format!("  round {round}:");
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let x = measure(work, strategies[i])?;
                results[i].push(x);
                line.push_str(&format!("  {} {x:.0} samples/s", strategies[i]));
            }
            println!("{line}");
        }
        let [one, four] = results.map(median);
        println!(
            "  median samples/s: one process (xla) {one:.0}, 4 processes (ddp) {four:.0}: {:.2}x",
            one / four
        );
        ratios.push(one / four);
    }
    println!(
        "xla/ddp on 4 devices: digits {:.2}x, wide {:.2}x",
        ratios[0], ratios[1]
    );
    Ok(())
}
