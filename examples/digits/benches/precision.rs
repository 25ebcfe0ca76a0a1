//! Training steps/s at each precision an accelerator runs, on a matmul-bound MLP.
//!
//! `cargo xtask bench precision [ROUNDS] [--accelerator cpu|cuda|wgpu] [--hidden W,W,…]
//! [--batch N] [--steps N]`. The model is the digits MLP made wide, trained with Adam on the
//! digits images; its size defaults to the accelerator's kind (cpu: 64-1024-1024-10 at batch
//! 256; GPUs: 64-8192-8192-8192-10, 135 M parameters, at batch 1437, the whole training split),
//! so that the matrix products dominate a step. A process trains in one float type per
//! device, so every measurement runs in a child process (this binary again, with
//! `EMBER_BENCH_PRECISION` set), which first trains a few warm-up steps (kernel compilation,
//! autotuning) and then times `--steps` steps, synchronising the device before the clock
//! stops; under a mixed precision it then times the Trainer's per-step cast of the weights
//! alone. Rounds alternate over the precisions. On cpu a line gives 32-true's GFLOP/s as a
//! share of the CPU's f32 peak (benches/common/cpu_peak.rs). The last line is
//! `bf16-mixed/32-true speed: X.XXx` (medians; 16-mixed where the accelerator has no bf16).

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, ensure};
use burn::module::Module;
use burn::tensor::backend::Backend;
use clap::Parser;
use clap::builder::{PossibleValuesParser, RangedU64ValueParser};
use clap::error::ErrorKind;
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::accelerator::AcceleratorKind;
use ember::options::Limit;
use ember::{Accelerator, DataModule, Plan, Precision, Stage, Trainer, TrainerOptions};
use ember_core::plugins::dtype;

#[path = "common/cpu_peak.rs"]
mod cpu_peak;
// Only its median: clap parses this bench's rounds.
#[allow(dead_code)]
#[path = "common/rounds.rs"]
mod rounds;
use rounds::median;

const CHILD: &str = "EMBER_BENCH_PRECISION";
const WARMUP_STEPS: u64 = 3;

/// Training steps/s at each precision an accelerator runs (`cargo xtask bench precision`).
#[derive(Parser)]
struct Args {
    /// Rounds over the precisions.
    #[arg(default_value_t = 3, value_parser = positive())]
    rounds: usize,
    /// The accelerator to measure (`cargo xtask bench precision --accelerator cuda|wgpu`
    /// builds those in).
    #[arg(long, default_value = "cpu", value_parser = PossibleValuesParser::new(BUILT_IN))]
    accelerator: String,
    /// Hidden widths of the MLP (default by accelerator kind).
    #[arg(long, value_delimiter = ',', value_parser = positive())]
    hidden: Option<Vec<usize>>,
    /// Images per step (default by accelerator kind).
    #[arg(long, value_parser = positive())]
    batch: Option<usize>,
    /// Timed steps per run (default by accelerator kind).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    steps: Option<u64>,
    /// Added by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The accelerators this build of the bench can measure.
const BUILT_IN: &[&str] = &[
    "cpu",
    #[cfg(feature = "cuda")]
    "cuda",
    #[cfg(feature = "wgpu")]
    "wgpu",
];

/// Parses an integer > 0.
fn positive() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..)
}

/// The model and step count a run measures.
struct Workload {
    hidden: Vec<usize>,
    batch: usize,
    steps: u64,
}

impl Workload {
    /// The defaults for an accelerator kind, overridden by the flags.
    fn new(kind: AcceleratorKind, args: &Args) -> Self {
        let (hidden, batch, steps) = match kind {
            AcceleratorKind::Cpu => (vec![1024, 1024], 256, 20),
            _ => (vec![8192, 8192, 8192], 1437, 50),
        };
        Workload {
            hidden: args.hidden.clone().unwrap_or(hidden),
            batch: args.batch.unwrap_or(batch),
            steps: args.steps.unwrap_or(steps),
        }
    }

    fn describe(&self) -> String {
        let widths: Vec<String> = self.hidden.iter().map(usize::to_string).collect();
        format!(
            "MLP 64-{}-10, batch {}, Adam, {} timed steps after {WARMUP_STEPS} warm-up",
            widths.join("-"),
            self.batch,
            self.steps
        )
    }
}

/// Trains `steps` steps of the workload at `precision` on device 0; returns the wall seconds
/// and the trained model.
fn fit<A: Accelerator>(
    trainer_precision: Precision,
    work: &Workload,
    steps: u64,
) -> anyhow::Result<(f64, DigitsModel<A::Backend>)> {
    let plan = Plan::local(A::name(), trainer_precision);
    let options = TrainerOptions {
        seed: Some(42),
        max_steps: Some(steps),
        // One batch per epoch: every step sees a full batch.
        limit_train_batches: Limit::Batches(1),
        limit_val_batches: Limit::Batches(0),
        num_sanity_val_steps: Some(0),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<A::Backend>::new::<A>(&plan, options)?;
    let mut data = DigitsData::new(DataConfig {
        batch_size: work.batch,
        ..DataConfig::default()
    });
    data.setup(Stage::Fit)?;
    let config = ModelConfig {
        hidden: work.hidden.clone(),
        ..ModelConfig::default()
    };
    let model = DigitsModel::<A::Backend>::new(&config, trainer.device());
    A::Backend::sync(trainer.device())?;
    let start = Instant::now();
    let out = trainer.fit(model, &mut data)?;
    A::Backend::sync(trainer.device())?;
    let seconds = start.elapsed().as_secs_f64();
    ensure!(
        out.global_step == steps,
        "{trainer_precision}: trained {} steps, not {steps}",
        out.global_step
    );
    Ok((seconds, out.model))
}

/// The child: warm up, then print the timed run's steps/s and, for a mixed precision, the
/// milliseconds of the Trainer's per-step cast of the f32 weights to the compute type.
fn child<A: Accelerator>(precision: Precision, work: &Workload) -> anyhow::Result<()> {
    fit::<A>(precision, work, WARMUP_STEPS)?;
    let (seconds, model) = fit::<A>(precision, work, work.steps)?;
    let mut line = format!("{}", work.steps as f64 / seconds);
    if let Some(low) = dtype::mixed_dtype(precision) {
        let device = model.devices()[0].clone();
        let start = Instant::now();
        for _ in 0..work.steps {
            drop(dtype::compute(model.clone(), low));
            A::Backend::sync(&device)?;
        }
        let per_cast = start.elapsed().as_secs_f64() / work.steps as f64;
        line.push_str(&format!(" {}", per_cast * 1e3));
    }
    println!("{line}");
    Ok(())
}

/// The parent: alternate child runs over the precisions and summarise.
fn parent<A: Accelerator>(args: &Args, work: &Workload) -> anyhow::Result<()> {
    if !A::is_available() {
        // Exits 2, as for any other bad flag value.
        clap::Error::raw(
            ErrorKind::InvalidValue,
            format!(
                "invalid value '{}' for '--accelerator': no device of it on this machine; cpu always is\n",
                A::name()
            ),
        )
        .exit();
    }
    let precisions = A::precisions();
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); precisions.len()];
    let mut casts: Vec<Vec<f64>> = vec![Vec::new(); precisions.len()];
    let exe = std::env::current_exe()?;
    println!("{} on {}: {}", A::name(), A::description(), work.describe());
    for round in 0..args.rounds {
        let mut line = format!("round {round}:");
        // Rotate the starting precision so that none always runs first.
        for k in 0..precisions.len() {
            let i = (k + round) % precisions.len();
            let p = precisions[i];
            let out = Command::new(&exe)
                .args(std::env::args().skip(1))
                .env(CHILD, p.name())
                .output()?;
            ensure!(
                out.status.success(),
                "{p}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let mut numbers = stdout.split_whitespace().map(str::parse::<f64>);
            let steps = numbers.next().context("no steps/s from the child")??;
            line.push_str(&format!(" {p} {steps:.1}"));
            results[i].push(steps);
            if let Some(cast_ms) = numbers.next() {
                casts[i].push(cast_ms?);
            }
        }
        println!("{line} steps/s");
    }
    let medians: Vec<f64> = results.into_iter().map(median).collect();
    let of = |p: Precision| precisions.iter().position(|q| *q == p).map(|i| medians[i]);
    let summary: Vec<String> = precisions
        .iter()
        .zip(&medians)
        .map(|(p, m)| format!("{p} {m:.1}"))
        .collect();
    println!("median steps/s: {}", summary.join(", "));
    for (i, p) in precisions.iter().enumerate() {
        if !casts[i].is_empty() {
            let cast_ms = median(casts[i].clone());
            let step_ms = 1e3 / medians[i];
            println!(
                "{p}: casting the f32 weights for a step takes {cast_ms:.2} ms of a {step_ms:.2} ms step ({:.1}%)",
                cast_ms / step_ms * 100.0
            );
        }
    }
    let f32 = of(Precision::F32True).context("every accelerator runs 32-true")?;
    if A::kind() == AcceleratorKind::Cpu {
        print_share_of_peak(work, f32);
    }
    match [Precision::Bf16Mixed, Precision::F16Mixed]
        .into_iter()
        .find_map(|p| of(p).map(|m| (p, m)))
    {
        Some((p, m)) => println!("{p}/32-true speed: {:.2}x", m / f32),
        None => println!("{}: no mixed precision to compare", A::name()),
    }
    Ok(())
}

/// 32-true's GFLOP/s against this CPU's f32 peak, so a change to the CPU path is measured
/// against the limit.
fn print_share_of_peak(work: &Workload, steps_per_second: f64) {
    let widths: Vec<usize> = std::iter::once(64)
        .chain(work.hidden.iter().copied())
        .chain(std::iter::once(10))
        .collect();
    let gflops = cpu_peak::mlp_step_flops(&widths, work.batch) * steps_per_second / 1e9;
    match cpu_peak::CpuPeak::of_this_machine() {
        Some(peak) => println!(
            "32-true: {gflops:.1} GFLOP/s in the matrix products, {:.1}% of this CPU's f32 peak of {:.1} GFLOP/s ({})",
            gflops / peak.gflops() * 100.0,
            peak.gflops(),
            peak.describe()
        ),
        None => println!("32-true: {gflops:.1} GFLOP/s (no /proc/cpuinfo to give the peak)"),
    }
}

fn run<A: Accelerator>(args: &Args) -> anyhow::Result<()> {
    let work = Workload::new(A::kind(), args);
    match std::env::var(CHILD) {
        Ok(name) => child::<A>(Precision::parse(&name)?, &work),
        Err(_) => parent::<A>(args, &work),
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.accelerator.as_str() {
        "cpu" => run::<ember::cpu::CpuAccelerator>(&args),
        #[cfg(feature = "cuda")]
        "cuda" => run::<ember::cuda::CudaAccelerator>(&args),
        #[cfg(feature = "wgpu")]
        "wgpu" => run::<ember::wgpu::WgpuAccelerator>(&args),
        other => unreachable!("clap admits only {BUILT_IN:?}, not {other}"),
    }
}
