//! ember on a GPU beside what users would otherwise run: (a) ember's Trainer on cuda, (b) a
//! hand-written burn-cuda loop, (c) PyTorch Lightning's Trainer and (d) a hand-written PyTorch
//! loop, each in 32-true and bf16-mixed, on a matmul-bound MLP (64-4096x4-10, batch 4096, on
//! the shipped digits tiled 16 times) and on the digits MLP (64-256-256-10, batch 64). Each run
//! is a process of its own; rounds rotate the order. No validation; the first epoch (kernel
//! compilation, autotuning, cuDNN/cuBLAS heuristics) is left out of every contender's clock.
//!
//! Runs on the GPU machine from the bundle (`scripts/gpu-bundle.sh`, `scripts/gpu-bench.sh`):
//! `gpu [ROUNDS] [--python PATH]`, the Python side is scripts/bench/vs_lightning.py with
//! `--device cuda`. Prints steps/s per contender and precision, ember/Lightning and
//! ember/hand-burn, and the MFU of the matmul-bound runs (model FLOPs per second over the GPU's
//! dense bf16 peak, from its name, or `EMBER_GPU_PEAK_TFLOPS`). The last line is
//! `bf16-mixed/32-true (ember, matmul-bound): X.XXx`.
//!
//! The same binary is each Rust contender: `gpu contender NAME PRECISION HIDDEN BATCH EPOCHS
//! DATA_FILE` prints one JSON line.

// Only its FLOP count of an MLP step is used here (the GPU's peak comes from its name).
#[allow(dead_code)]
#[path = "common/cpu_peak.rs"]
mod cpu_peak;
#[path = "common/rounds.rs"]
mod rounds;
#[path = "common/split.rs"]
mod split;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::module::AutodiffModule as _;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use cpu_peak::mlp_step_flops;
use digits::data::{Digits, DigitsData, PIXELS, batch_of};
use digits::model::{DigitsModel, Mlp, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::{Callback, CallbackContext};
use ember::cuda::CudaAccelerator;
use ember::options::Limit;
use ember::{Accelerator, Plan, Precision, Trainer, TrainerOptions, epoch_permutation};
use ember_core::plugins::dtype;
use rounds::{median, rounds};

type B = <CudaAccelerator as Accelerator>::Backend;

const SEED: u64 = 42;
const PRECISIONS: [&str; 2] = ["32-true", "bf16-mixed"];
const CONTENDERS: [&str; 4] = ["ember", "burn-hand", "lightning", "torch-hand"];

/// One task: hidden widths, batch, epochs (the first untimed), data tiling.
struct Task {
    name: &'static str,
    hidden: &'static str,
    batch: usize,
    epochs: usize,
    tiles: usize,
}

const MATMUL: Task = Task {
    name: "matmul-bound",
    hidden: "4096,4096,4096,4096",
    batch: 4096,
    epochs: 4,
    tiles: 16,
};

const DIGITS: Task = Task {
    name: "digits",
    hidden: "256,256",
    batch: 64,
    epochs: 4,
    tiles: 1,
};

// ---- the contenders (inside their own process) ----

/// The clock after the first training epoch: (when, steps so far).
#[derive(Clone, Default)]
struct AfterFirstEpoch(std::rc::Rc<std::cell::Cell<Option<(Instant, u64)>>>);

impl Callback for AfterFirstEpoch {
    fn name(&self) -> &str {
        "AfterFirstEpoch"
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if self.0.get().is_none() {
            B::sync(&Default::default())?;
            self.0.set(Some((Instant::now(), ctx.state.global_step)));
        }
        Ok(())
    }
}

/// ember's Trainer on cuda; returns the steps and seconds after the first epoch.
fn ember_fit(
    precision: Precision,
    model: &ModelConfig,
    data: &DataConfig,
    epochs: usize,
) -> anyhow::Result<(u64, f64)> {
    let root = tempfile::tempdir()?;
    let options = TrainerOptions {
        seed: Some(SEED),
        max_epochs: Some(epochs as u64),
        enable_progress_bar: false,
        limit_val_batches: Limit::Batches(0),
        num_sanity_val_steps: Some(0),
        default_root_dir: root.path().to_owned(),
        ..TrainerOptions::default()
    };
    let clock = AfterFirstEpoch::default();
    let plan = Plan::local(CudaAccelerator::name(), precision);
    let mut trainer =
        Trainer::<B>::new::<CudaAccelerator>(&plan, options)?.with_callback(clock.clone());
    let model = DigitsModel::<B>::new(model, trainer.device());
    let out = trainer.fit(model, &mut DigitsData::new(data.clone()))?;
    B::sync(trainer.device())?;
    let (start, first) = clock
        .0
        .get()
        .ok_or_else(|| anyhow::anyhow!("no epoch ended"))?;
    Ok((out.global_step - first, start.elapsed().as_secs_f64()))
}

/// A hand-written burn loop on burn-cuda: Adam, the same batches; under bf16-mixed it keeps
/// f32 master weights and computes with a bf16 copy each step, as a burn user would with
/// ember's dtype helpers. Returns the steps and seconds after the first epoch.
fn burn_hand(
    precision: Precision,
    model_config: &ModelConfig,
    data: &DataConfig,
    epochs: usize,
) -> anyhow::Result<(u64, f64)> {
    let device = CudaAccelerator::parallel_devices(&[0]).remove(0);
    dtype::apply::<B>(&device, precision)?;
    let (train, _) = data.load()?;
    B::seed(&device, SEED);
    let mixed = dtype::mixed_dtype(precision);
    let mut model: Mlp<B> = model_config.init::<B>(&device);
    if mixed.is_some() {
        model = dtype::master(model);
    }
    let mut optimizer = AdamConfig::new().init::<B, Mlp<B>>();
    let (mut steps, mut clock) = (0u64, None);
    for epoch in 0..epochs {
        let order = epoch_permutation(train.len(), SEED, epoch as u64);
        for indices in order.chunks(data.batch_size) {
            let batch = batch_of::<B>(&train, indices, &device);
            let computing = match mixed {
                Some(low) => dtype::compute(model.clone(), low),
                None => model.clone(),
            };
            let loss = computing.loss(batch.images, batch.labels);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optimizer.step(model_config.lr, model, grads);
            steps += 1;
        }
        if clock.is_none() {
            B::sync(&device)?;
            clock = Some((Instant::now(), steps));
        }
    }
    B::sync(&device)?;
    let _ = model.valid();
    let (start, first) = clock.ok_or_else(|| anyhow::anyhow!("no epoch ran"))?;
    Ok((steps - first, start.elapsed().as_secs_f64()))
}

/// Runs contender `name` here and prints its JSON line.
fn contender(name: &str, args: &[String]) -> anyhow::Result<()> {
    let [precision, hidden, batch, epochs, file] = args else {
        anyhow::bail!("usage: contender NAME PRECISION HIDDEN BATCH EPOCHS DATA_FILE");
    };
    let precision = Precision::parse(precision)?;
    let model = ModelConfig {
        hidden: hidden
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()?,
        ..ModelConfig::default()
    };
    let data = DataConfig {
        path: Some(PathBuf::from(file)),
        batch_size: batch.parse()?,
        ..DataConfig::default()
    };
    let epochs: usize = epochs.parse()?;
    let (steps, train_s) = match name {
        "ember" => ember_fit(precision, &model, &data, epochs)?,
        "burn-hand" => burn_hand(precision, &model, &data, epochs)?,
        other => anyhow::bail!("unknown contender {other}"),
    };
    println!(
        "{}",
        serde_json::json!({"steps": steps, "train_s": train_s, "val_acc": null})
    );
    Ok(())
}

// ---- the driver ----

/// Writes `task`'s data twice: a `.csv.gz` in the shipped format (the shipped digits repeated
/// `tiles` times) for the Rust contenders, and the 80/20 split they make of it as raw arrays
/// for the Python side; returns the file and the training samples.
fn write_data(task: &Task, dir: &Path) -> anyhow::Result<(PathBuf, usize)> {
    let shipped = Digits::shipped()?;
    let file = dir.join("data.csv.gz");
    let mut out =
        flate2::write::GzEncoder::new(std::fs::File::create(&file)?, flate2::Compression::fast());
    for _ in 0..task.tiles {
        for (pixels, label) in shipped.pixels.chunks(PIXELS).zip(&shipped.labels) {
            let row: Vec<String> = pixels
                .iter()
                .map(|p| ((p * 16.0).round() as u8).to_string())
                .collect();
            writeln!(out, "{},{label}", row.join(","))?;
        }
    }
    out.finish()?;
    let data = DataConfig {
        path: Some(file.clone()),
        ..DataConfig::default()
    };
    let train_len = split::write_split(&data, dir)?;
    Ok((file, train_len))
}

/// `--python PATH`, else `python3`.
fn python() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == "--python")
        .map_or_else(|| "python3".to_owned(), |w| w[1].clone())
}

/// The Python script beside this binary in the bundle, else in the source tree.
fn script() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("vs_lightning.py")));
    match beside {
        Some(path) if path.exists() => path,
        _ => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/bench/vs_lightning.py"
        )),
    }
}

/// Runs `name` in `precision` on `task` and returns its steps/s after the first epoch.
fn measure(
    name: &str,
    precision: &str,
    task: &Task,
    dir: &Path,
    file: &Path,
) -> anyhow::Result<f64> {
    let mut command = if name == "ember" || name == "burn-hand" {
        let mut c = Command::new(std::env::current_exe()?);
        c.args(["contender", name, precision]);
        c
    } else {
        let mut c = Command::new(python());
        c.arg(script()).arg(name).arg(dir);
        c
    };
    command
        .arg(task.hidden)
        .arg(task.batch.to_string())
        .arg(task.epochs.to_string());
    if name == "ember" || name == "burn-hand" {
        command.arg(file);
    } else {
        command.args(["--no-val", "--device", "cuda", "--precision", precision]);
    }
    let output = command.env_remove("RUST_LOG").output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        anyhow::anyhow!(
            "{name} {precision} printed no report ({e}): {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    let steps = report["steps"].as_f64().unwrap_or(0.0);
    Ok(steps / report["train_s"].as_f64().unwrap_or(f64::NAN))
}

/// The GPU's dense bf16 peak in TFLOP/s: `EMBER_GPU_PEAK_TFLOPS`, else from its name.
fn bf16_peak_tflops(name: &str) -> Option<f64> {
    if let Some(peak) = std::env::var("EMBER_GPU_PEAK_TFLOPS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return Some(peak);
    }
    let known = [
        ("H200", 989.0),
        ("H100 PCIe", 756.0),
        ("H100", 989.0),
        ("A100", 312.0),
        ("L4", 121.0),
    ];
    known
        .iter()
        .find(|(model, _)| name.contains(model))
        .map(|(_, peak)| *peak)
}

/// Steps/s of every contender in every precision on `task`, rotating the order each round.
fn alternate(task: &Task, dir: &Path, file: &Path, rounds: usize) -> anyhow::Result<Vec<f64>> {
    let runs: Vec<(&str, &str)> = PRECISIONS
        .iter()
        .flat_map(|p| CONTENDERS.iter().map(move |c| (*c, *p)))
        .collect();
    let mut figures = vec![Vec::new(); runs.len()];
    for round in 0..rounds {
        for k in 0..runs.len() {
            let i = (round + k) % runs.len();
            let (name, precision) = runs[i];
            let sps = measure(name, precision, task, dir, file)?;
            eprintln!(
                "round {round}: {} {name:<11} {precision:<10} {sps:>9.1} steps/s",
                task.name
            );
            figures[i].push(sps);
        }
    }
    Ok(figures.into_iter().map(median).collect())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [first, name, rest @ ..] = args.as_slice()
        && first == "contender"
    {
        return contender(name, rest);
    }
    let rounds = rounds(3);
    anyhow::ensure!(
        CudaAccelerator::is_available(),
        "no CUDA device: this benchmark runs on a GPU machine"
    );
    let gpu = ember::cuda::device_name(0).unwrap_or_else(|| "unknown GPU".into());
    let peak = bf16_peak_tflops(&gpu);
    println!(
        "GPU: {gpu}; dense bf16 peak {}",
        peak.map_or("unknown (set EMBER_GPU_PEAK_TFLOPS)".into(), |p| format!(
            "{p:.0} TFLOP/s"
        ))
    );
    let mut ember_speedup = f64::NAN;
    for task in [&MATMUL, &DIGITS] {
        let dir = tempfile::tempdir()?;
        let (file, train_len) = write_data(task, dir.path())?;
        let widths: Vec<usize> = std::iter::once(PIXELS)
            .chain(task.hidden.split(',').map(|w| w.parse().unwrap()))
            .chain([10])
            .collect();
        println!(
            "\n{}: MLP {}, Adam, batch {}, {} epochs of {train_len} samples (the first untimed); {rounds} rounds",
            task.name,
            widths
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("-"),
            task.batch,
            task.epochs
        );
        let medians = alternate(task, dir.path(), &file, rounds)?;
        let sps =
            |contender: usize, precision: usize| medians[precision * CONTENDERS.len() + contender];
        // Mean FLOPs per optimizer step: every sample once per epoch, the last batch partial.
        let steps_per_epoch = train_len.div_ceil(task.batch) as f64;
        let flops_per_step = mlp_step_flops(&widths, 1) * train_len as f64 / steps_per_epoch;
        for (p, precision) in PRECISIONS.iter().enumerate() {
            for (c, name) in CONTENDERS.iter().enumerate() {
                let mfu = peak.map_or(String::new(), |peak| {
                    format!(
                        "  MFU {:.1}%",
                        100.0 * sps(c, p) * flops_per_step / (peak * 1e12)
                    )
                });
                println!("{precision:<10} {name:<11} {:>9.1} steps/s{mfu}", sps(c, p));
            }
            println!(
                "{precision:<10} ember/Lightning: {:.2}x  ember/hand-burn: {:.2}x  ember/torch-hand: {:.2}x",
                sps(0, p) / sps(2, p),
                sps(0, p) / sps(1, p),
                sps(0, p) / sps(3, p)
            );
        }
        if task.name == MATMUL.name {
            ember_speedup = sps(0, 1) / sps(0, 0);
        }
    }
    println!("bf16-mixed/32-true (ember, matmul-bound): {ember_speedup:.2}x");
    Ok(())
}
