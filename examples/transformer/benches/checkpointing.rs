//! `--trainer.activation_checkpointing` on the larger transformer (d_model 256, 4 blocks of 4
//! heads, context 128, batch 32, the example's AdamW and schedule), whose blocks run through
//! `ember::nn::recompute`: on, the backward pass keeps each block's input and runs the block
//! again instead of keeping its activations; off, every activation is kept. Each setting is a
//! process of its own (2 threads) fitting `STEPS` steps through the transformer app's command
//! line, no validation, loggers or checkpoints; it reports the fit's steps/s and its own peak
//! resident memory (VmHWM, start-up and data included). A hand-written burn loop (AdamW at a
//! constant rate, burn's own layer norm rather than ember's fused kernel) runs the same model
//! with `ember::nn::Recomputing` held or not beside it. The settings alternate, and the figures
//! are medians over the rounds.
//!
//! `cargo xtask bench checkpointing [ROUNDS]`; last line:
//! `checkpointing/transformer-l: peak RSS X.XXx (on A MiB, off B MiB), steps/s X.XXx (on C, off D)`
//! (the Trainer's).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use transformer::data::TokenBatcher;
use transformer::{CharLm, TokenBatch};

use ember::{App, AppJob, AppOutput, Cli, CliOutcome};
use transformer::CharLmApp;

#[path = "../../digits/benches/common/rounds.rs"]
mod rounds;
use rounds::{median, rounds};

/// Optimizer steps each fit takes.
const STEPS: u64 = 13;

/// Fits the larger transformer with activation checkpointing `on` or not; returns steps/s.
fn contender(on: bool) -> anyhow::Result<f64> {
    let registry = CharLmApp::register(ember::registry::<AppJob<CharLmApp>>())?;
    let args = [
        "transformer",
        "fit",
        "--model.d_model=256",
        "--model.heads=4",
        "--model.layers=4",
        "--data.context=128",
        "--trainer.limit_val_batches=0",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_model_summary=false",
        "--trainer.enable_progress_bar=false",
    ]
    .map(String::from)
    .into_iter()
    .chain([
        format!("--trainer.max_steps={STEPS}"),
        format!("--trainer.activation_checkpointing={on}"),
    ]);
    let env = ember::plugins::Env::from([("EMBER_INVENTORY".to_owned(), String::new())]);
    match Cli::for_app::<CharLmApp>().execute(args, &env, &registry, AppJob::from) {
        CliOutcome::Ran(AppOutput::Fit { steps, seconds, .. }) => Ok(steps as f64 / seconds),
        CliOutcome::Failed { message, .. } => anyhow::bail!("{message}"),
        _ => anyhow::bail!("the fit did not run"),
    }
}

/// The larger transformer trained by hand on backend `B` for `STEPS` steps after a first one;
/// returns steps/s.
fn by_hand<B: AutodiffBackend>(device: &B::Device) -> anyhow::Result<f64> {
    let (config, data) = transformer::larger();
    let (train, _) = data.load()?;
    B::seed(device, 7);
    let mut net = CharLm::<B>::new(&config, device);
    let mut optimizer = AdamWConfig::new().init::<B, CharLm<B>>();
    let mut seconds = 0.0;
    let batches = train.chunks(data.batch_size).take(STEPS as usize + 1);
    for (step, windows) in batches.enumerate() {
        let started = Instant::now();
        let batch: TokenBatch<B> = TokenBatcher.batch(windows.to_vec(), device);
        let loss = net.loss(batch.inputs, batch.targets);
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        net = optimizer.step(config.lr, net, grads);
        let _ = loss.into_scalar();
        if step > 0 {
            seconds += started.elapsed().as_secs_f64();
        }
    }
    Ok(STEPS as f64 / seconds)
}

/// This process's peak resident memory, MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: Option<f64> = (status.lines())
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
    kib.map_or(f64::NAN, |k| k / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(setting) = args
        .iter()
        .position(|a| a == "contender")
        .map(|i| &args[i + 1])
    {
        let rate = match setting.as_str() {
            "hand-on" => {
                let _on = ember::nn::Recomputing::on::<Autodiff<Flex>>();
                by_hand::<Autodiff<Flex>>(&FlexDevice)?
            }
            "hand-off" => by_hand::<Autodiff<Flex>>(&FlexDevice)?,
            on_or_off => contender(on_or_off == "on")?,
        };
        println!("{rate} {}", peak_rss_mib());
        return Ok(());
    }
    let rounds = rounds(3);
    let exe = std::env::current_exe()?;
    let mut results: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for round in 0..rounds {
        let order = match round % 2 {
            0 => ["off", "on", "hand-off", "hand-on"],
            _ => ["hand-on", "hand-off", "on", "off"],
        };
        for setting in order {
            let out = Command::new(&exe)
                .args(["contender", setting])
                .env("RAYON_NUM_THREADS", "2")
                .output()?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            anyhow::ensure!(out.status.success(), "{setting}: {stderr}");
            let text = String::from_utf8(out.stdout)?;
            // The fit's own report comes first; the contender's figures are the last line.
            let last = text.lines().last().unwrap_or_default();
            let numbers: Vec<f64> = (last.split_whitespace())
                .filter_map(|p| p.parse().ok())
                .collect();
            let [rate, rss] = numbers[..] else {
                anyhow::bail!("{setting} printed `{text}`");
            };
            println!("round {round} {setting:>8}: {rate:.2} steps/s, peak RSS {rss:.0} MiB");
            results.entry(setting).or_default().push((rate, rss));
        }
    }
    let pick =
        |setting: &str, f: fn(&(f64, f64)) -> f64| median(results[setting].iter().map(f).collect());
    let (hand_on, hand_off) = (pick("hand-on", |r| r.1), pick("hand-off", |r| r.1));
    let (hand_on_rate, hand_off_rate) = (pick("hand-on", |r| r.0), pick("hand-off", |r| r.0));
    println!(
        "hand loop, burn's layer norm: peak RSS {:.2}x (on {hand_on:.0} MiB, off {hand_off:.0} MiB), steps/s {:.2}x",
        hand_on / hand_off,
        hand_on_rate / hand_off_rate
    );
    let (on_rate, off_rate) = (pick("on", |r| r.0), pick("off", |r| r.0));
    let (on_rss, off_rss) = (pick("on", |r| r.1), pick("off", |r| r.1));
    println!(
        "checkpointing/transformer-l: peak RSS {:.2}x (on {on_rss:.0} MiB, off {off_rss:.0} MiB), steps/s {:.2}x (on {on_rate:.2}, off {off_rate:.2})",
        on_rss / off_rss,
        on_rate / off_rate
    );
    Ok(())
}
