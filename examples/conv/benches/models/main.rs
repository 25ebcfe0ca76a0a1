//! ember against what users would otherwise run, on the models users train: the digits MLP
//! (64-256-256-10, Adam 1e-3, 30 epochs) and the conv example's CNN (conv-bn-relu ×2, max pool,
//! dropout, linear; Adam 3e-3 ×0.9 per epoch, 15 epochs), batch 64, on the same 80/20 split;
//! the transformer example's character-level model at its defaults (2 blocks of width 64,
//! context 64, batch 32, AdamW with warm-up and cosine decay, gradient clipping; 2 epochs) on the
//! same windows of its corpus; and two models of realistic size: the conv example's ResNet on
//! 4096 generated 32×32 RGB images (batch 128, Adam 1e-3, one epoch) and the transformer at
//! d_model 256, 4 blocks of 4 heads, context 128 (`transformer-l`, one epoch); validation every
//! epoch; by (a) ember on its default `cpu` accelerator (burn-flex), (b) ember on every other
//! CPU-capable accelerator built in (`tch-cpu` with the `tch` feature, `xla` with `tpu-xla`),
//! (c) a hand-written burn loop on burn-flex, (d) a hand-written PyTorch loop and (e) PyTorch
//! Lightning's Trainer (progress bar off). Each contender is a process of its own with 2
//! threads; the order rotates every round. The weights start from each framework's default
//! initialisation, which is the same scheme (uniform in ±1/√fan_in for linear and conv weights
//! and biases, batch norm at 1 and 0).
//!
//! Every model runs in two settings: the Trainers' defaults (checkpointing, a CSV logger, the
//! model summary) and `bare` (loggers, checkpoints and summary off on both sides: compute
//! alone). The hand loops have neither and run in the bare setting only. Every round prints a
//! line per contender; each table gives medians and ranges.
//!
//! `cargo xtask bench models [ROUNDS] [--model a,b]` (the torch venv: scripts/setup.sh
//! --torch). Train steps/s is optimizer steps over the fit's time less its validation time (the
//! sanity check included), measured inside each process the same way; wall time and peak RSS
//! are the whole process's, start-up included; the metric is val_acc (MLP, CNN, ResNet) or
//! val_loss (transformers). The two large models also get their FLOPs per training step from
//! their layer shapes and each contender's share of this machine's peak: the best of GEMM
//! probes on the same threads, one before every round (a shared VM's cores change speed over
//! seconds). The last line gives the bare setting's ratios (medians, and the
//! lowest round's where rounds swing):
//! `ember(cpu)/Lightning: mlp X.XXx, cnn X.XXx (min Y.YYx), transformer X.XXx (min Y.YYx),
//! resnet X.XXx, transformer-l X.XXx; peak share resnet ember A% torch B%, transformer-l ember
//! A% torch B%`. The PyTorch sides are scripts/bench/vs_lightning.py and char_lm.py; torch's
//! `nn.MultiheadAttention` initialises its projections with Xavier, burn's with its linear
//! default, the one difference in the initial-weight schemes.
//!
//! The same binary is each Rust contender: `models contender NAME MODEL SETTING` prints one
//! JSON line.

mod contender;
#[path = "../../../digits/benches/common/contest.rs"]
mod contest;
mod lm;
mod peak;
mod resnet;
#[path = "../../../digits/benches/common/rounds.rs"]
mod rounds;
#[path = "../../../digits/benches/common/split.rs"]
mod split;

use std::path::Path;
use std::process::Command;

use contest::{python, run_contender};
use convnet::ConvConfig;
use digits::train::DataConfig;
use peak::Probes;
use rounds::{median, rounds};

const THREADS: &str = "2";
const SEED: u64 = 42;

/// The models of the comparison.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Mlp,
    Cnn,
    Transformer,
    ResNet,
    TransformerL,
}

/// A model of the comparison and how it is trained.
#[derive(Clone, Copy)]
struct Model {
    kind: Kind,
    epochs: usize,
    /// Adam's rate and its factor per epoch (the transformers take `LmConfig`'s schedule).
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
            Kind::TransformerL => "transformer-l",
        }
    }

    /// Whether this is one of the two transformers.
    fn is_transformer(self) -> bool {
        matches!(self.kind, Kind::Transformer | Kind::TransformerL)
    }

    /// FLOPs of one training step, for the models whose peak share is reported.
    fn flops_per_step(self) -> Option<f64> {
        match self.kind {
            Kind::ResNet => Some(resnet::flops_per_step()),
            Kind::TransformerL => Some(lm::flops_per_step(true)),
            _ => None,
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
    lr: images::model::LR,
    lr_decay: 1.0,
};

/// The larger transformer (one epoch: 26 steps).
const TRANSFORMER_L: Model = Model {
    kind: Kind::TransformerL,
    epochs: 1,
    lr: 3e-3,
    lr_decay: 1.0,
};

const MODELS: [Model; 5] = [MLP, CNN, TRANSFORMER, RESNET, TRANSFORMER_L];

const BATCH: usize = 64;

fn model_named(name: &str) -> anyhow::Result<Model> {
    MODELS
        .into_iter()
        .find(|m| m.name() == name)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown model {name:?}: mlp, cnn, transformer, resnet or transformer-l"
            )
        })
}

/// The models named by `--model a,b` among the arguments, else all of them.
fn chosen_models(args: &[String]) -> anyhow::Result<Vec<Model>> {
    match args.iter().position(|a| a == "--model") {
        Some(i) => {
            let names = args.get(i + 1).map(String::as_str).unwrap_or("");
            names.split(',').map(model_named).collect()
        }
        None => Ok(MODELS.to_vec()),
    }
}

/// How the Trainer-based contenders are set up.
#[derive(Clone, Copy, PartialEq)]
enum Setting {
    /// Each Trainer's defaults: checkpointing, a CSV logger, the model summary.
    Defaults,
    /// Loggers, checkpoints and the model summary off: compute alone.
    Bare,
}

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::Defaults => "defaults",
            Setting::Bare => "bare",
        }
    }

    fn named(name: &str) -> anyhow::Result<Setting> {
        [Setting::Defaults, Setting::Bare]
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| anyhow::anyhow!("unknown setting {name:?}: defaults or bare"))
    }
}

/// The contenders built into this binary that run in `setting`, in the order of the table:
/// ember's accelerators first, the hand loops (bare only), Lightning last.
fn contenders(setting: Setting) -> Vec<&'static str> {
    let mut names = vec!["ember"];
    if cfg!(feature = "tch") {
        names.push("ember-tch-cpu");
    }
    if cfg!(feature = "tpu-xla") {
        names.push("ember-xla");
    }
    if setting == Setting::Bare {
        names.extend(["burn-hand", "torch-hand"]);
    }
    names.push("lightning");
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

// ---- the driver ----

/// The command that runs contender `name` on `model` in `setting`.
fn command(name: &str, model: Model, data: &Path, setting: Setting) -> anyhow::Result<Command> {
    let script = |file: &str| format!("{}/../../scripts/bench/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut command = match name {
        "torch-hand" | "lightning" if model.is_transformer() => {
            let mut c = Command::new(python("models")?);
            c.arg(script("char_lm.py"))
                .arg(name)
                .arg(data.join(model.name()));
            c.arg(model.epochs.to_string());
            c
        }
        "torch-hand" | "lightning" => {
            // The script's `--model` and HIDDEN (the MLP's widths, the CNN's channels, the
            // ResNet's width), its batch size and data.
            let (kind, widths, batch, dir) = match model.kind {
                Kind::Cnn => ("cnn", "16,32", BATCH, data.to_owned()),
                Kind::ResNet => {
                    let batch = resnet::images().batch_size;
                    ("resnet", "32", batch, data.join("images"))
                }
                _ => ("mlp", "256,256", BATCH, data.to_owned()),
            };
            let mut c = Command::new(python("models")?);
            c.arg(script("vs_lightning.py"))
                .arg(name)
                .arg(dir)
                .arg(widths);
            c.args([batch.to_string(), model.epochs.to_string()]);
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
    command.arg(format!("--setting={}", setting.name()));
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

fn measure(name: &str, model: Model, data: &Path, setting: Setting) -> anyhow::Result<Run> {
    let (report, wall_s, peak_rss) = run_contender(name, command(name, model, data, setting)?)?;
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

/// Runs every contender on `model` in `setting` `rounds` times, rotating which goes first,
/// with a GEMM probe before each round; prints every round and the table, and returns each
/// contender's train steps/s per round.
fn compare(
    names: &[&str],
    model: Model,
    data: &Path,
    setting: Setting,
    rounds: usize,
    probes: &mut Probes,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut runs: Vec<Vec<Run>> = names.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        probes.probe(THREADS.parse()?);
        for k in 0..names.len() {
            let i = (round + k) % names.len();
            let run = measure(names[i], model, data, setting)?;
            eprintln!(
                "{} {} round {round}: {:<14} {:>7.1} steps/s  metric {:.4}  wall {:.2} s",
                model.name(),
                setting.name(),
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
    for (name, runs) in names.iter().zip(&runs) {
        let of = |f: fn(&Run) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        let sps = of(|r| r.steps_per_s);
        let lo = sps.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = sps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!(
            "{name:<14} {:>14.1} {:>15} {:>8.4} {:>7.2} {:>6.0} MB",
            median(sps),
            format!("({lo:.1}-{hi:.1})"),
            median(of(|r| r.metric)),
            median(of(|r| r.wall_s)),
            median(of(|r| r.peak_rss as f64)) / 1e6,
        );
    }
    Ok(runs
        .iter()
        .map(|runs| runs.iter().map(|r| r.steps_per_s).collect())
        .collect())
}

/// ember's first accelerator over Lightning: the median of the rounds' ratios, and the lowest.
fn ratio(per_round: &[Vec<f64>]) -> (f64, f64) {
    let (ember, lightning) = (&per_round[0], &per_round[per_round.len() - 1]);
    let ratios: Vec<f64> = ember.iter().zip(lightning).map(|(e, l)| e / l).collect();
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    (median(ratios), min)
}

/// Prints each contender's FLOP/s and share of `peak` on `model`; returns ember's and the
/// torch loop's shares in percent.
fn peak_shares(
    model: Model,
    names: &[&str],
    per_round: &[Vec<f64>],
    flops: f64,
    peak: f64,
) -> (f64, f64) {
    println!(
        "\n{}: {:.1} GFLOP per training step (forward multiply-adds x 2 x 3)",
        model.name(),
        flops / 1e9,
    );
    let share = |steps: &Vec<f64>| 100.0 * flops * median(steps.clone()) / peak;
    for (name, steps) in names.iter().zip(per_round) {
        let achieved = flops * median(steps.clone());
        println!(
            "{name:<14} {:>6.1} GFLOP/s  {:>4.0}% of peak",
            achieved / 1e9,
            share(steps)
        );
    }
    let torch = names.iter().position(|n| *n == "torch-hand");
    (
        share(&per_round[0]),
        torch.map_or(f64::NAN, |i| share(&per_round[i])),
    )
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [first, name, model, setting] = args.as_slice()
        && first == "contender"
    {
        let setting = Setting::named(setting.trim_start_matches("--setting="))?;
        return contender::contender(name, model_named(model)?, setting);
    }
    let rounds = rounds(3);
    let models = chosen_models(&args)?;
    let data = tempfile::tempdir()?;
    split::write_split(&data_config(), data.path())?;
    for large in [false, true] {
        let model = if large { TRANSFORMER_L } else { TRANSFORMER };
        lm::write_windows(&data.path().join(model.name()), large)?;
    }
    resnet::write_images(&data.path().join("images"))?;
    // A first untimed run of each warms the page cache (libraries, Python's modules).
    let warm = Model { epochs: 1, ..MLP };
    for name in contenders(Setting::Bare) {
        measure(name, warm, data.path(), Setting::Bare)?;
    }
    let mut probes = Probes::default();
    let (mut defaults, mut bare, mut measured) = (Vec::new(), Vec::new(), Vec::new());
    for model in models {
        for setting in [Setting::Defaults, Setting::Bare] {
            println!(
                "\n{} ({}): {} epochs, validation every epoch; {THREADS} threads each; {rounds} rounds",
                model.name(),
                setting.name(),
                model.epochs
            );
            let names = contenders(setting);
            let per_round = compare(&names, model, data.path(), setting, rounds, &mut probes)?;
            let (median_ratio, min) = ratio(&per_round);
            let shown = match (setting, model.kind) {
                (Setting::Bare, Kind::Cnn | Kind::Transformer) => {
                    format!("{} {median_ratio:.2}x (min {min:.2}x)", model.name())
                }
                _ => format!("{} {median_ratio:.2}x", model.name()),
            };
            if setting == Setting::Defaults {
                defaults.push(shown);
                continue;
            }
            bare.push(shown);
            if let Some(flops) = model.flops_per_step() {
                measured.push((model, names, per_round, flops));
            }
        }
    }
    // The shares are read against the best probe of the whole run, so they are printed last.
    if !measured.is_empty() {
        println!(
            "\nthis machine's GEMM peak on {THREADS} threads: {:.0} GFLOP/s \
             (the best of {} probes, one before each round; the lowest {:.0})",
            probes.peak() / 1e9,
            probes.count(),
            probes.lowest() / 1e9
        );
    }
    let shares: Vec<String> = (measured.into_iter())
        .map(|(model, names, per_round, flops)| {
            let (ember, torch) = peak_shares(model, &names, &per_round, flops, probes.peak());
            format!("{} ember {ember:.0}% torch {torch:.0}%", model.name())
        })
        .collect();
    println!("\ndefaults: ember(cpu)/Lightning: {}", defaults.join(", "));
    let shares = if shares.is_empty() {
        String::new()
    } else {
        format!("; peak share {}", shares.join(", "))
    };
    println!("ember(cpu)/Lightning: {}{shares}", bare.join(", "));
    Ok(())
}
