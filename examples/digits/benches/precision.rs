//! Steps/s of digits training at each precision the cpu accelerator runs.
//!
//! `cargo xtask bench precision [ROUNDS]`. A process trains in one float type per device, so
//! every measurement runs in a child process (this binary again, with
//! `EMBER_BENCH_PRECISION` set); rounds alternate over the precisions. The last line is
//! `bf16-mixed/32-true speed: X.XXx` (medians).

use std::process::Command;

use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::cpu::CpuAccelerator;
use ember::{Accelerator, DataModule, Plan, Precision, Stage, Trainer, TrainerOptions};

const EPOCHS: u64 = 10;
const CHILD: &str = "EMBER_BENCH_PRECISION";

type B = <CpuAccelerator as Accelerator>::Backend;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Trains digits at `precision` and prints its steps/s (training only).
fn child(precision: Precision) -> anyhow::Result<()> {
    let plan = Plan::local(CpuAccelerator::name(), precision);
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(EPOCHS),
        limit_val_batches: ember::trainer::options::Limit::Batches(0),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<B>::new::<CpuAccelerator>(&plan, options)?;
    let mut data = DigitsData::new(DataConfig::default());
    data.setup(Stage::Fit)?;
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let out = trainer.fit(model, &mut data)?;
    println!("{}", out.global_step as f64 / out.seconds);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if let Ok(name) = std::env::var(CHILD) {
        return child(Precision::parse(&name)?);
    }
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let precisions = CpuAccelerator::precisions();
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); precisions.len()];
    let exe = std::env::current_exe()?;
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        for (i, p) in precisions.iter().enumerate() {
            let out = Command::new(&exe).env(CHILD, p.name()).output()?;
            anyhow::ensure!(
                out.status.success(),
                "{p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let steps: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
            line.push_str(&format!(" {p} {steps:.0}"));
            results[i].push(steps);
        }
        println!("{line} steps/s");
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    let of = |p: Precision| precisions.iter().position(|q| *q == p).map(|i| medians[i]);
    let summary: Vec<String> = precisions
        .iter()
        .zip(&medians)
        .map(|(p, m)| format!("{p} {m:.0}"))
        .collect();
    println!(
        "median steps/s on cpu (burn-flex, digits MLP, batch 64, Adam, {EPOCHS} epochs): {}",
        summary.join(", ")
    );
    if let (Some(bf16), Some(f32)) = (of(Precision::Bf16Mixed), of(Precision::F32True)) {
        println!("bf16-mixed/32-true speed: {:.2}x", bf16 / f32);
    }
    Ok(())
}
