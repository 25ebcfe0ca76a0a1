//! What `--trainer.profiler` costs: the digits MLP (30 epochs) and the conv example's CNN
//! (15 epochs), batch 64, on the `cpu` accelerator through the Trainer (checkpoints, CSV logger
//! and sanity check on, progress bar off, as a user runs them), with the profiler off, `simple`
//! and `advanced`, alternating in one process, the order rotating every round.
//!
//! `cargo xtask bench profiler [ROUNDS]` (default 5). Per model and mode it prints the median
//! fit seconds; the last line is `profiler cost: mlp simple +X.X%, advanced +Y.Y%; cnn simple
//! +X.X%, advanced +Y.Y%` (median fit time over the profiler-off median, minus one).

#[path = "../../digits/benches/common/rounds.rs"]
mod rounds;

use std::time::Instant;

use convnet::{ConvConfig, ConvNet};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::cpu::CpuAccelerator;
use ember::options::ProfilerKind;
use ember::{Accelerator, Plan, Precision, Trainer, TrainerOptions};
use rounds::{median, rounds};

type B = <CpuAccelerator as Accelerator>::Backend;

const MODES: [(&str, Option<ProfilerKind>); 3] = [
    ("off", None),
    ("simple", Some(ProfilerKind::Simple)),
    ("advanced", Some(ProfilerKind::Advanced)),
];

/// One fit of `model` (`mlp` or `cnn`) with the profiler in `mode`; its seconds.
fn fit(model: &str, mode: Option<ProfilerKind>) -> anyhow::Result<f64> {
    let root = tempfile::tempdir()?;
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(if model == "mlp" { 30 } else { 15 }),
        enable_progress_bar: false,
        enable_model_summary: false,
        profiler: mode,
        default_root_dir: root.path().to_owned(),
        ..TrainerOptions::default()
    };
    let plan = Plan::local("cpu", Precision::F32True);
    let mut trainer = Trainer::<B>::new::<CpuAccelerator>(&plan, options)?;
    let data = DigitsData::new(DataConfig {
        batch_size: 64,
        ..DataConfig::default()
    });
    let start = Instant::now();
    match model {
        "mlp" => {
            let net = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
            trainer.fit(net, &mut { data })?;
        }
        _ => {
            let config = ConvConfig::default();
            trainer = trainer.with_hparams(serde_json::json!({ "model": config }));
            let net = ConvNet::<B>::new(&config, trainer.device());
            trainer.fit(net, &mut { data })?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(5);
    let mut summary = Vec::new();
    for model in ["mlp", "cnn"] {
        // A warm-up fit of each mode (page faults, the allocator's first growth).
        for (_, mode) in MODES {
            fit(model, mode)?;
        }
        let mut seconds = vec![Vec::new(); MODES.len()];
        for round in 0..rounds {
            for k in 0..MODES.len() {
                let m = (round + k) % MODES.len();
                seconds[m].push(fit(model, MODES[m].1)?);
            }
        }
        let medians: Vec<f64> = seconds.into_iter().map(median).collect();
        for ((name, _), m) in MODES.iter().zip(&medians) {
            println!("{model} {name:<8} {m:.3} s (median of {rounds})");
        }
        let cost = |m: f64| 100.0 * (m / medians[0] - 1.0);
        summary.push(format!(
            "{model} simple {:+.1}%, advanced {:+.1}%",
            cost(medians[1]),
            cost(medians[2])
        ));
    }
    println!("profiler cost: {}", summary.join("; "));
    Ok(())
}
