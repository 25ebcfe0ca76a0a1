//! ember against what users would otherwise run, on the models users train: the digits MLP
//! (64-256-256-10, Adam 1e-3, 30 epochs) and the conv example's CNN (conv-bn-relu ×2, max pool,
//! dropout, linear; Adam 3e-3 ×0.9 per epoch, 15 epochs), batch 64, on the same 80/20 split;
//! and the transformer example's character-level model at its defaults (2 blocks of width 64,
//! context 64, batch 32, AdamW with warm-up and cosine decay, gradient clipping; 2 epochs) on the
//! same windows of its corpus; validation every epoch; by
//! (a) ember on its default `cpu` accelerator (burn-flex), (b) ember on every other CPU-capable
//! accelerator built in (`tch-cpu` with the `tch` feature, `xla` with `tpu-xla`), (c) a
//! hand-written burn loop on burn-flex, (d) a hand-written PyTorch loop and (e) PyTorch
//! Lightning's Trainer (default callbacks and logger; progress bar off). Each contender is a
//! process of its own with 2 threads; the order rotates every round. The weights start from
//! each framework's default initialisation, which is the same scheme (uniform in
//! ±1/√fan_in for linear and conv weights and biases, batch norm at 1 and 0).
//!
//! `cargo xtask bench models [ROUNDS]` (the torch venv: scripts/setup.sh --torch). Train
//! steps/s is optimizer steps over the fit's time less its validation time (the sanity check
//! included), measured inside each process the same way; wall time and peak RSS are the whole
//! process's, start-up included; the metric is val_acc (MLP, CNN) or val_loss (transformer).
//! The ResNet (the conv example's, on 4096 generated 32×32 RGB images, batch 128, Adam 1e-3,
//! one epoch) also gets its FLOPs per training step from its layer shapes and each
//! contender's share of this machine's peak, measured by a GEMM probe on the same threads.
//! `--model resnet` (or a comma list) runs only the named models. The last line is
//! `ember(cpu)/Lightning: mlp X.XXx, cnn X.XXx, transformer X.XXx, resnet X.XXx; resnet peak
//! share ember A% torch B%` (train steps/s, medians). The PyTorch sides are scripts/bench/vs_lightning.py and char_lm.py;
//! torch's `nn.MultiheadAttention` initialises its projections with Xavier, burn's with its
//! linear default, the one difference in the initial-weight schemes.
//!
//! The same binary is each Rust contender: `models contender NAME MODEL` prints one JSON line.

#[path = "../../../digits/benches/common/contest.rs"]
mod contest;
mod resnet;
#[path = "../../../digits/benches/common/rounds.rs"]
mod rounds;
#[path = "../../../digits/benches/common/split.rs"]
mod split;

use std::cell::Cell;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::grad_clipping::GradientClippingConfig;
use burn::module::AutodiffModule;
use burn::optim::lr_scheduler::LrScheduler as _;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use contest::{ValClock, python, run_contender};
use convnet::images::GeneratedImages;
use convnet::resnet::{ResNet, ResNetConfig};
use convnet::{ConvConfig, ConvNet};
use digits::data::{DigitsBatch, DigitsData, batch_of};
use digits::model::{DigitsModel, ModelConfig, loss_and_accuracy};
use digits::train::{DataConfig, fit_by_hand};
use ember::{Accelerator, Plan, Precision, Trainer, TrainerOptions, epoch_permutation};
use rounds::{median, rounds};
use transformer::data::TokenBatcher;
use transformer::{CharLm, CorpusData, DataConfig as LmData, LmConfig, TokenBatch, WarmupCosine};

const THREADS: &str = "2";
const SEED: u64 = 42;

/// The models of the comparison.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Mlp,
    Cnn,
    Transformer,
    ResNet,
}

/// A model of the comparison and how it is trained.
#[derive(Clone, Copy)]
struct Model {
    kind: Kind,
    epochs: usize,
    /// Adam's rate and its factor per epoch (the transformer takes `LmConfig`'s schedule).
    lr: f64,
    lr_decay: f64,
}

impl Model {
    fn name(self) -> &'static str {
        match self.kind {
            Kind::Mlp => "mlp",
            Kind::Cnn => "cnn",
            Kind::Transformer => "transformer",
            Kind::ResNet => "resnet",
        }
    }
}

const MLP: Model = Model {
    kind: Kind::Mlp,
    epochs: 30,
    lr: 1e-3,
    lr_decay: 1.0,
};

const CNN: Model = Model {
    kind: Kind::Cnn,
    epochs: 15,
    lr: 3e-3,
    lr_decay: 0.9,
};

/// The transformer example at its defaults.
const TRANSFORMER: Model = Model {
    kind: Kind::Transformer,
    epochs: 2,
    lr: 3e-3,
    lr_decay: 1.0,
};

/// The ResNet on generated 32×32 images (Adam at a constant rate).
const RESNET: Model = Model {
    kind: Kind::ResNet,
    epochs: 1,
    lr: convnet::resnet::LR,
    lr_decay: 1.0,
};

const BATCH: usize = 64;

fn model_named(name: &str) -> anyhow::Result<Model> {
    [MLP, CNN, TRANSFORMER, RESNET]
        .into_iter()
        .find(|m| m.name() == name)
        .ok_or_else(|| anyhow::anyhow!("unknown model {name:?}: mlp, cnn, transformer or resnet"))
}

/// The models named by `--model a,b` among the arguments, else all of them.
fn chosen_models(args: &[String]) -> anyhow::Result<Vec<Model>> {
    match args.iter().position(|a| a == "--model") {
        Some(i) => {
            let names = args.get(i + 1).map(String::as_str).unwrap_or("");
            names.split(',').map(model_named).collect()
        }
        None => Ok(vec![MLP, CNN, TRANSFORMER, RESNET]),
    }
}

/// The contenders built into this binary, in the order of the table.
fn contenders() -> Vec<&'static str> {
    let mut names = vec!["ember"];
    if cfg!(feature = "tch") {
        names.push("ember-tch-cpu");
    }
    if cfg!(feature = "tpu-xla") {
        names.push("ember-xla");
    }
    names.extend(["burn-hand", "torch-hand", "lightning"]);
    names
}

/// What one contender's process reported and cost.
struct Run {
    steps_per_s: f64,
    /// val_acc, or the transformer's val_loss.
    metric: f64,
    wall_s: f64,
    peak_rss: u64,
}

// ---- the contenders (inside their own process) ----

/// A Trainer fit on accelerator `A` with the defaults a user gets (checkpointing, CSV logger,
/// sanity check), progress bar off; returns steps, train seconds and the final metric.
fn ember_fit<A: Accelerator>(model: Model) -> anyhow::Result<(u64, f64, f64)> {
    let root = tempfile::tempdir()?;
    let options = TrainerOptions {
        seed: Some(SEED),
        max_epochs: Some(model.epochs as u64),
        enable_progress_bar: false,
        default_root_dir: root.path().to_owned(),
        // The transformer example's own default (`transformer fit`).
        gradient_clip_val: (model.kind == Kind::Transformer).then_some(1.0),
        ..TrainerOptions::default()
    };
    let val_seconds = Rc::new(Cell::new(0.0));
    let plan = Plan::local(A::name(), Precision::F32True);
    let mut trainer = Trainer::<A::Backend>::new::<A>(&plan, options)?
        .with_callback(ValClock::new(val_seconds.clone()));
    // Only `fit` is timed (model and data made before it), as the Python side times its fit.
    macro_rules! timed_fit {
        ($net:expr, $data:expr, $metric:literal) => {{
            let (net, mut data) = ($net, $data);
            let start = Instant::now();
            let out = trainer.fit(net, &mut data)?;
            let metric = out.metrics.get($metric).copied().unwrap_or(f64::NAN);
            (out.global_step, metric, start.elapsed())
        }};
    }
    let (steps, metric, seconds) = match model.kind {
        Kind::Mlp => {
            let net = DigitsModel::<A::Backend>::new(&ModelConfig::default(), trainer.device());
            timed_fit!(net, DigitsData::new(data_config()), "val_acc")
        }
        Kind::Cnn => {
            // The CNN's optimizer reads its rate and decay from the `model` hyperparameters.
            trainer = trainer.with_hparams(serde_json::json!({"model": conv_config(model)}));
            let net = ConvNet::<A::Backend>::new(&conv_config(model), trainer.device());
            timed_fit!(net, DigitsData::new(data_config()), "val_acc")
        }
        Kind::Transformer => {
            let (lm, data) = (LmConfig::default(), LmData::default());
            trainer = trainer.with_hparams(serde_json::json!({"model": lm, "data": data}));
            let net = CharLm::<A::Backend>::new(&lm, trainer.device());
            timed_fit!(net, CorpusData::new(data), "val_loss")
        }
        Kind::ResNet => {
            let net = ResNet::<A::Backend>::new(&ResNetConfig::default(), trainer.device());
            timed_fit!(net, GeneratedImages::new(resnet::images()), "val_acc")
        }
    };
    let train_s = seconds.as_secs_f64() - val_seconds.get();
    Ok((steps, train_s, metric))
}

fn data_config() -> DataConfig {
    DataConfig {
        batch_size: BATCH,
        ..DataConfig::default()
    }
}

fn conv_config(model: Model) -> ConvConfig {
    ConvConfig {
        lr: model.lr,
        lr_decay: model.lr_decay,
        ..ConvConfig::default()
    }
}

/// The CNN trained by a hand-written burn loop: the epochs' shuffles of ember's seed, Adam,
/// the rate decayed after every epoch, validation accuracy after every epoch.
fn cnn_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model: Model,
) -> anyhow::Result<(u64, f64, f64)> {
    let config = data_config();
    let (train, val) = config.load()?;
    ember::host_float::set_flush_denormal_everywhere(true);
    B::seed(device, config.seed);
    let mut net = ConvNet::<B>::new(&conv_config(model), device);
    let mut optimizer = AdamConfig::new().init::<B, ConvNet<B>>();
    let (mut steps, mut val_s, mut val_acc, mut lr) = (0, 0.0, f64::NAN, model.lr);
    let accuracy = |batch: DigitsBatch<B::InnerBackend>, net: &ConvNet<B::InnerBackend>| {
        let (_, acc) = loss_and_accuracy(net.forward(batch.images), batch.labels);
        acc.into_scalar().elem::<f64>()
    };
    let start = Instant::now();
    for epoch in 0..model.epochs {
        let order = epoch_permutation(train.len(), config.seed, epoch as u64);
        for indices in order.chunks(config.batch_size) {
            let batch = batch_of::<B>(&train, indices, device);
            let (loss, _) = loss_and_accuracy(net.forward(batch.images), batch.labels);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(lr, net, grads);
            let _ = loss.into_scalar();
            steps += 1;
        }
        lr *= model.lr_decay;
        let validating = Instant::now();
        let all: Vec<usize> = (0..val.len()).collect();
        val_acc = accuracy(
            batch_of::<B::InnerBackend>(&val, &all, device),
            &net.valid(),
        );
        val_s += validating.elapsed().as_secs_f64();
    }
    Ok((steps, start.elapsed().as_secs_f64() - val_s, val_acc))
}

/// The transformer trained by a hand-written burn loop: AdamW with its gradient norm clipped
/// at 1, the warm-up and cosine schedule per step, the epochs' shuffles of ember's seed, the
/// validation loss over every held-out window after every epoch.
fn lm_by_hand<B: AutodiffBackend>(
    device: &B::Device,
    model: Model,
) -> anyhow::Result<(u64, f64, f64)> {
    let (lm, data) = (LmConfig::default(), LmData::default());
    let (train, val) = data.load()?;
    ember::host_float::set_flush_denormal_everywhere(true);
    B::seed(device, SEED);
    let mut net = CharLm::<B>::new(&lm, device);
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(lm.weight_decay as f32)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init::<B, CharLm<B>>();
    let floor = lm.lr * lm.min_lr_ratio;
    let mut schedule = WarmupCosine::new(lm.lr, floor, lm.warmup_steps, lm.decay_steps);
    let (mut steps, mut val_s, mut val_loss) = (0, 0.0, f64::NAN);
    let start = Instant::now();
    for epoch in 0..model.epochs {
        let order = epoch_permutation(train.len(), SEED, epoch as u64);
        for indices in order.chunks(data.batch_size) {
            let windows = indices.iter().map(|&i| train[i].clone()).collect();
            let batch: TokenBatch<B> = TokenBatcher.batch(windows, device);
            let loss = net.loss(batch.inputs, batch.targets);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optimizer.step(schedule.step(), net, grads);
            let _ = loss.into_scalar();
            steps += 1;
        }
        let validating = Instant::now();
        let batch: TokenBatch<B::InnerBackend> = TokenBatcher.batch(val.clone(), device);
        val_loss = net
            .valid()
            .loss(batch.inputs, batch.targets)
            .into_scalar()
            .elem::<f64>();
        val_s += validating.elapsed().as_secs_f64();
    }
    Ok((steps, start.elapsed().as_secs_f64() - val_s, val_loss))
}

/// Writes the transformer's windows and settings for scripts/bench/char_lm.py in `dir`.
fn write_windows(dir: &Path) -> anyhow::Result<()> {
    let (lm, data) = (LmConfig::default(), LmData::default());
    let (train, val) = data.load()?;
    for (name, set) in [("train.u8", &train), ("val.u8", &val)] {
        std::fs::write(
            dir.join(name),
            set.iter().flat_map(|w| w.0.clone()).collect::<Vec<u8>>(),
        )?;
    }
    let meta = serde_json::json!({
        "vocab": transformer::data::VOCAB, "context": data.context, "batch": data.batch_size,
        "d_model": lm.d_model, "heads": lm.heads, "layers": lm.layers, "mlp_ratio": lm.mlp_ratio,
        "dropout": lm.dropout, "lr": lm.lr, "weight_decay": lm.weight_decay,
        "warmup": lm.warmup_steps, "decay": lm.decay_steps, "min_lr_ratio": lm.min_lr_ratio,
        "max_context": lm.max_context,
    });
    std::fs::write(dir.join("meta.json"), meta.to_string())?;
    Ok(())
}

/// Runs contender `name` on `model` here and prints its JSON line.
fn contender(name: &str, model: Model) -> anyhow::Result<()> {
    type Cpu = ember::cpu::CpuAccelerator;
    let (steps, train_s, metric) = match (name, model.kind) {
        ("ember", _) => ember_fit::<Cpu>(model)?,
        #[cfg(feature = "tch")]
        ("ember-tch-cpu", _) => ember_fit::<ember::tch::TchCpuAccelerator>(model)?,
        #[cfg(feature = "tpu-xla")]
        ("ember-xla", _) => ember_fit::<ember::xla::XlaAccelerator>(model)?,
        ("burn-hand", Kind::Mlp) => {
            let config = ModelConfig::default();
            let (_, report) = fit_by_hand::<Autodiff<Flex>>(
                &FlexDevice,
                &config,
                &data_config(),
                model.epochs,
                |_, _| {},
            )?;
            let val_acc = report.val_accuracy.last().copied().unwrap_or(f64::NAN);
            (
                report.steps as u64,
                report.seconds - report.val_seconds,
                val_acc,
            )
        }
        ("burn-hand", Kind::Cnn) => cnn_by_hand::<Autodiff<Flex>>(&FlexDevice, model)?,
        ("burn-hand", Kind::Transformer) => lm_by_hand::<Autodiff<Flex>>(&FlexDevice, model)?,
        ("burn-hand", Kind::ResNet) => {
            resnet::resnet_by_hand::<Autodiff<Flex>>(&FlexDevice, model.epochs, SEED)?
        }
        (other, _) => anyhow::bail!("unknown contender {other}"),
    };
    let report = serde_json::json!({"steps": steps, "train_s": train_s, "metric": metric});
    println!("{report}");
    Ok(())
}

// ---- the driver ----

/// The command that runs contender `name` on `model`.
fn command(name: &str, model: Model, data: &Path) -> anyhow::Result<Command> {
    let mut command = match name {
        "torch-hand" | "lightning" if model.kind == Kind::Transformer => {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/bench/char_lm.py"
            );
            let mut c = Command::new(python("models")?);
            c.arg(script).arg(name).arg(data.join("lm"));
            c.arg(model.epochs.to_string());
            c
        }
        "torch-hand" | "lightning" if model.kind == Kind::ResNet => {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/bench/vs_lightning.py"
            );
            let images = resnet::images();
            let mut c = Command::new(python("models")?);
            c.arg(script).arg(name).arg(data.join("images")).arg("32");
            c.args([images.batch_size.to_string(), model.epochs.to_string()]);
            c.args(["--model", "resnet", "--lr", &model.lr.to_string()]);
            c
        }
        "torch-hand" | "lightning" => {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/bench/vs_lightning.py"
            );
            // The script's `--model` and HIDDEN (the MLP's widths, the CNN's channels).
            let (kind, widths) = match model.kind {
                Kind::Cnn => ("cnn", "16,32"),
                _ => ("mlp", "256,256"),
            };
            let mut c = Command::new(python("models")?);
            c.arg(script).arg(name).arg(data).arg(widths);
            c.args([BATCH.to_string(), model.epochs.to_string()]);
            c.args(["--model", kind, "--lr", &model.lr.to_string()]);
            c.args(["--lr-decay", &model.lr_decay.to_string()]);
            c
        }
        _ => {
            let mut c = Command::new(std::env::current_exe()?);
            c.args(["contender", name, model.name()]);
            c
        }
    };
    // Two threads in all for every contender: rayon's pool for burn-flex, LibTorch's intra-op
    // pool (ember sets it from RAYON_NUM_THREADS; the script calls torch.set_num_threads),
    // OpenMP's for torch's own, and XLA CPU's (PJRT_NPROC).
    command
        .env("RAYON_NUM_THREADS", THREADS)
        .env("OMP_NUM_THREADS", THREADS)
        .env("PJRT_NPROC", THREADS)
        .env_remove("RUST_LOG");
    Ok(command)
}

fn measure(name: &str, model: Model, data: &Path) -> anyhow::Result<Run> {
    let (report, wall_s, peak_rss) = run_contender(name, command(name, model, data)?)?;
    let steps = report["steps"].as_f64().unwrap_or(0.0);
    let train_s = report["train_s"].as_f64().unwrap_or(f64::NAN);
    let metric = ["metric", "val_acc", "val_loss"]
        .iter()
        .find_map(|key| report[key].as_f64())
        .unwrap_or(f64::NAN);
    Ok(Run {
        steps_per_s: steps / train_s,
        metric,
        wall_s,
        peak_rss,
    })
}

/// Runs every contender on `model` `rounds` times, rotating which goes first; prints the table
/// and returns each contender's median train steps/s.
fn compare(names: &[&str], model: Model, data: &Path, rounds: usize) -> anyhow::Result<Vec<f64>> {
    let mut runs: Vec<Vec<Run>> = names.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..names.len() {
            let i = (round + k) % names.len();
            let run = measure(names[i], model, data)?;
            eprintln!(
                "{} round {round}: {:<14} {:>7.1} steps/s  metric {:.4}  wall {:.2} s",
                model.name(),
                names[i],
                run.steps_per_s,
                run.metric,
                run.wall_s
            );
            runs[i].push(run);
        }
    }
    println!(
        "{:<14} {:>14} {:>15} {:>8} {:>7} {:>9}",
        "contender", "train steps/s", "(range)", "metric", "wall s", "peak RSS"
    );
    let mut medians = Vec::new();
    for (name, runs) in names.iter().zip(&runs) {
        let of = |f: fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        let sps = of(|r| r.steps_per_s);
        let lo = sps.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = sps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        medians.push(median(sps.clone()));
        println!(
            "{name:<14} {:>14.1} {:>15} {:>8.4} {:>7.2} {:>6.0} MB",
            median(sps),
            format!("({lo:.1}-{hi:.1})"),
            median(of(|r| r.metric)),
            median(of(|r| r.wall_s)),
            median(of(|r| r.peak_rss as f64)) / 1e6,
        );
    }
    Ok(medians)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [first, name, model] = args.as_slice()
        && first == "contender"
    {
        return contender(name, model_named(model)?);
    }
    let rounds = rounds(3);
    let data = tempfile::tempdir()?;
    split::write_split(&data_config(), data.path())?;
    std::fs::create_dir(data.path().join("lm"))?;
    write_windows(&data.path().join("lm"))?;
    resnet::write_images(&data.path().join("images"))?;
    let names = contenders();
    // A first untimed run of each warms the page cache (libraries, Python's modules).
    let warm = Model { epochs: 1, ..MLP };
    for name in &names {
        measure(name, warm, data.path())?;
    }
    let lightning = names.len() - 1;
    let torch = names.len() - 2;
    let mut ratios = Vec::new();
    let mut shares = String::new();
    for model in chosen_models(&args)? {
        println!(
            "\n{}: {} epochs, validation every epoch; {THREADS} threads each; {rounds} rounds",
            model.name(),
            model.epochs
        );
        let medians = compare(&names, model, data.path(), rounds)?;
        ratios.push(format!(
            "{} {:.2}x",
            model.name(),
            medians[0] / medians[lightning]
        ));
        if model.kind == Kind::ResNet {
            let flops = resnet::flops_per_step();
            let peak = resnet::gemm_peak(THREADS.parse()?);
            println!(
                "{:.1} GFLOP per training step (forward multiply-adds x 2 x 3); \
                 this machine's GEMM peak on {THREADS} threads: {:.0} GFLOP/s",
                flops / 1e9,
                peak / 1e9
            );
            for (name, steps_per_s) in names.iter().zip(&medians) {
                let achieved = flops * steps_per_s;
                println!(
                    "{name:<14} {:>6.1} GFLOP/s  {:>4.0}% of peak",
                    achieved / 1e9,
                    100.0 * achieved / peak
                );
            }
            let share = |i: usize| 100.0 * flops * medians[i] / peak;
            shares = format!(
                "; resnet peak share ember {:.0}% torch {:.0}%",
                share(0),
                share(torch)
            );
        }
    }
    println!("ember(cpu)/Lightning: {}{shares}", ratios.join(", "));
    Ok(())
}
