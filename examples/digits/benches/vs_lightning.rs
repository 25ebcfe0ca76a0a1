//! ember against what users would otherwise run: the digits task (MLP 64-256-256-10, Adam 1e-3,
//! batch 64, 30 epochs, validation every epoch, the same 80/20 split and pixel scaling) by
//! (a) ember on its default cpu accelerator (burn-flex), (b) ember on LibTorch (`tch-cpu`),
//! (c) a hand-written burn loop on burn-flex, (d) a hand-written PyTorch loop and (e) PyTorch
//! Lightning's Trainer (default callbacks and logger; progress bar off), each in a process of
//! its own with 2 threads, rotating the order every round. Then a matmul-bound MLP
//! (64-1024-1024-10, batch 256, no validation) on ember-flex, ember-libtorch and hand-written
//! torch, against this machine's f32 peak.
//!
//! `cargo xtask bench vs-lightning [ROUNDS]` (needs the torch venv: scripts/setup.sh --torch).
//! Train steps/s is optimizer steps over the fit's time less its validation time (sanity check
//! included), measured inside each process the same way; wall time and peak RSS are the whole
//! process's, start-up included. The last two lines are `ember/Lightning: X.XXx` (train
//! steps/s, medians) and `ember-libtorch/torch-hand: X.XXx`.
//!
//! The same binary is each Rust contender: `vs_lightning contender NAME DATA HIDDEN BATCH
//! EPOCHS [--no-val]` prints one JSON line.

#[path = "common/contest.rs"]
mod contest;
#[path = "common/cpu_peak.rs"]
mod cpu_peak;
#[path = "common/rounds.rs"]
mod rounds;
#[path = "common/split.rs"]
mod split;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use contest::{ValClock, python, run_contender};
use cpu_peak::{CpuPeak, mlp_step_flops};
use digits::data::{DigitsData, PIXELS};
use digits::model::{DigitsModel, ModelConfig};
use digits::train::{DataConfig, fit_by_hand, train_by_hand};
use ember::options::Limit;
use ember::tch::TchCpuAccelerator;
use ember::{Accelerator, Trainer, TrainerOptions};
use rounds::{median, rounds};

const THREADS: &str = "2";
const SEED: u64 = 42;

/// One task: the model's hidden widths, the batch, the epochs, whether to validate.
struct Task {
    hidden: &'static str,
    batch: usize,
    epochs: usize,
    validate: bool,
}

const DIGITS: Task = Task {
    hidden: "256,256",
    batch: 64,
    epochs: 30,
    validate: true,
};

const MATMUL: Task = Task {
    hidden: "1024,1024",
    batch: 256,
    epochs: 8,
    validate: false,
};

/// What one contender's process reported and cost.
struct Run {
    steps_per_s: f64,
    val_acc: f64,
    wall_s: f64,
    peak_rss: u64,
    train_s: f64,
}

/// Every run of one contender.
#[derive(Default)]
struct Runs(Vec<Run>);

impl Runs {
    fn steps_per_s(&self) -> Vec<f64> {
        self.0.iter().map(|r| r.steps_per_s).collect()
    }

    fn median_of(&self, f: impl Fn(&Run) -> f64) -> f64 {
        median(self.0.iter().map(f).collect())
    }
}

// ---- the contenders (inside their own process) ----

/// A Trainer fit with the defaults a user gets (checkpointing, CSV logger, sanity check),
/// progress bar off; returns steps, train seconds and the final val_acc.
fn ember_fit<B: AutodiffBackend>(
    device: B::Device,
    model: &ModelConfig,
    data: &DataConfig,
    epochs: usize,
    validate: bool,
) -> anyhow::Result<(u64, f64, f64)> {
    let root = tempfile::tempdir()?;
    let mut options = TrainerOptions {
        seed: Some(SEED),
        max_epochs: Some(epochs as u64),
        enable_progress_bar: false,
        default_root_dir: root.path().to_owned(),
        ..TrainerOptions::default()
    };
    if !validate {
        options.limit_val_batches = Limit::Batches(0);
    }
    let val_seconds = std::rc::Rc::new(std::cell::Cell::new(0.0));
    let mut trainer =
        Trainer::<B>::on_device(device, options)?.with_callback(ValClock::new(val_seconds.clone()));
    let model = DigitsModel::<B>::new(model, trainer.device());
    let start = Instant::now();
    let out = trainer.fit(model, &mut DigitsData::new(data.clone()))?;
    let train_s = start.elapsed().as_secs_f64() - val_seconds.get();
    let val_acc = out.metrics.get("val_acc").copied().unwrap_or(f64::NAN);
    Ok((out.global_step, train_s, val_acc))
}

/// Runs contender `name` here and prints its JSON line.
fn contender(name: &str, args: &[String]) -> anyhow::Result<()> {
    let [hidden, batch, epochs, rest @ ..] = args else {
        anyhow::bail!("usage: contender NAME HIDDEN BATCH EPOCHS [--no-val]");
    };
    let epochs: usize = epochs.parse()?;
    let validate = !rest.iter().any(|a| a == "--no-val");
    let model = ModelConfig {
        hidden: hidden
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()?,
        ..ModelConfig::default()
    };
    let data = DataConfig {
        batch_size: batch.parse()?,
        ..DataConfig::default()
    };
    let (steps, train_s, val_acc) = match name {
        "ember" => ember_fit::<Autodiff<Flex>>(FlexDevice, &model, &data, epochs, validate)?,
        "ember-libtorch" => {
            type B = <TchCpuAccelerator as Accelerator>::Backend;
            let device = TchCpuAccelerator::parallel_devices(&[0]).remove(0);
            ember_fit::<B>(device, &model, &data, epochs, validate)?
        }
        "burn-hand" => {
            type B = Autodiff<Flex>;
            let (_, report) = if validate {
                fit_by_hand::<B>(&FlexDevice, &model, &data, epochs, |_, _| {})?
            } else {
                train_by_hand::<B>(&FlexDevice, &model, &data, epochs)?
            };
            let val_acc = report.val_accuracy.last().copied().unwrap_or(f64::NAN);
            let train_s = report.seconds - report.val_seconds;
            (report.steps as u64, train_s, val_acc)
        }
        other => anyhow::bail!("unknown contender {other}"),
    };
    // serde_json writes NaN (no validation) as null.
    let report = serde_json::json!({"steps": steps, "train_s": train_s, "val_acc": val_acc});
    println!("{report}");
    Ok(())
}

// ---- the driver ----

/// The command that runs contender `name` on `task`.
fn command(name: &str, task: &Task, data: &Path) -> anyhow::Result<Command> {
    let mut command = match name {
        "torch-hand" | "lightning" => {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/bench/vs_lightning.py"
            );
            let mut c = Command::new(python("vs-lightning")?);
            c.arg(script).arg(name).arg(data);
            c
        }
        _ => {
            let mut c = Command::new(std::env::current_exe()?);
            c.args(["contender", name]);
            c
        }
    };
    command
        .arg(task.hidden)
        .arg(task.batch.to_string())
        .arg(task.epochs.to_string())
        .args((!task.validate).then_some("--no-val"))
        // Two threads in all for every contender: rayon's pool for burn-flex, LibTorch's
        // intra-op pool (ember sets it from RAYON_NUM_THREADS; the script calls
        // torch.set_num_threads), and OpenMP's for torch's own.
        .env("RAYON_NUM_THREADS", THREADS)
        .env("OMP_NUM_THREADS", THREADS)
        .env_remove("RUST_LOG");
    Ok(command)
}

fn measure(name: &str, task: &Task, data: &Path) -> anyhow::Result<Run> {
    let (report, wall_s, peak_rss) = run_contender(name, command(name, task, data)?)?;
    let steps = report["steps"].as_f64().unwrap_or(0.0);
    let train_s = report["train_s"].as_f64().unwrap_or(f64::NAN);
    Ok(Run {
        steps_per_s: steps / train_s,
        val_acc: report["val_acc"].as_f64().unwrap_or(f64::NAN),
        wall_s,
        peak_rss,
        train_s,
    })
}

/// Runs every contender `rounds` times, rotating which goes first.
fn alternate(
    names: &[&'static str],
    task: &Task,
    data: &Path,
    rounds: usize,
) -> anyhow::Result<Vec<Runs>> {
    let mut runs: Vec<Runs> = names.iter().map(|_| Runs::default()).collect();
    for round in 0..rounds {
        for k in 0..names.len() {
            let i = (round + k) % names.len();
            let run = measure(names[i], task, data)?;
            eprintln!(
                "round {round}: {:<15} {:>7.1} steps/s  val_acc {:.4}  wall {:.2} s",
                names[i], run.steps_per_s, run.val_acc, run.wall_s
            );
            runs[i].0.push(run);
        }
    }
    Ok(runs)
}

fn range(v: &[f64]) -> (f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [first, name, rest @ ..] = args.as_slice()
        && first == "contender"
    {
        return contender(name, rest);
    }
    let rounds = rounds(3);
    let data = tempfile::tempdir()?;
    split::write_split(&DataConfig::default(), data.path())?;
    // A first untimed run of each warms the page cache (libtorch's libraries, Python's modules).
    let names = [
        "ember",
        "ember-libtorch",
        "burn-hand",
        "torch-hand",
        "lightning",
    ];
    for name in names {
        let quick = Task {
            epochs: 1,
            ..DIGITS
        };
        measure(name, &quick, data.path())?;
    }

    println!(
        "digits: MLP 64-{}-10, Adam 1e-3, batch {}, {} epochs, validation every epoch; {THREADS} threads each; {rounds} rounds",
        DIGITS.hidden.replace(',', "-"),
        DIGITS.batch,
        DIGITS.epochs
    );
    let digits = alternate(&names, &DIGITS, data.path(), rounds)?;
    println!(
        "{:<15} {:>16} {:>17} {:>9} {:>8} {:>10}",
        "contender", "train steps/s", "(range)", "val_acc", "wall s", "peak RSS"
    );
    for (name, runs) in names.iter().zip(&digits) {
        let (lo, hi) = range(&runs.steps_per_s());
        println!(
            "{name:<15} {:>16.1} {:>17} {:>9.4} {:>8.2} {:>7.0} MB",
            median(runs.steps_per_s()),
            format!("({lo:.1}-{hi:.1})"),
            runs.0.last().map_or(f64::NAN, |r| r.val_acc),
            runs.median_of(|r| r.wall_s),
            runs.median_of(|r| r.peak_rss as f64) / 1e6,
        );
    }

    let peak = CpuPeak::of_this_machine();
    let widths: Vec<usize> = std::iter::once(PIXELS)
        .chain(MATMUL.hidden.split(',').map(|w| w.parse().unwrap()))
        .chain([10])
        .collect();
    println!(
        "\nmatmul-bound: MLP {}, batch {}, {} epochs, no validation; f32 peak {}",
        widths
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("-"),
        MATMUL.batch,
        MATMUL.epochs,
        peak.as_ref().map_or("unknown".into(), |p| format!(
            "{:.0} GFLOP/s = {}",
            p.gflops(),
            p.describe()
        ))
    );
    let matmul_names = ["ember", "ember-libtorch", "torch-hand"];
    let matmul = alternate(&matmul_names, &MATMUL, data.path(), rounds)?;
    // Every sample of every epoch goes through the model once: flops per sample are the
    // step's over its batch (the last, partial batch included).
    let train_len = DataConfig::default().load()?.0.len();
    let flops = mlp_step_flops(&widths, 1) * (train_len * MATMUL.epochs) as f64;
    for (name, runs) in matmul_names.iter().zip(&matmul) {
        let gflops = flops / runs.median_of(|r| r.train_s) / 1e9;
        let share = peak.as_ref().map_or(String::new(), |p| {
            format!(" = {:.1}% of peak", 100.0 * gflops / p.gflops())
        });
        println!(
            "{name:<15} {:>8.1} steps/s  {gflops:>6.1} GFLOP/s{share}",
            median(runs.steps_per_s())
        );
    }

    let sps = |runs: &Runs| median(runs.steps_per_s());
    println!("ember/Lightning: {:.2}x", sps(&digits[0]) / sps(&digits[4]));
    println!(
        "ember-libtorch/torch-hand: {:.2}x",
        sps(&digits[1]) / sps(&digits[3])
    );
    Ok(())
}
