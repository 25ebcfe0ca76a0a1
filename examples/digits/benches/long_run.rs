//! A long CPU run with and without flushing subnormal floats (`--trainer.flush_denormal`).
//!
//! `cargo xtask bench long-run [ROUNDS]`: digits for 300 epochs through the Trainer on the cpu
//! accelerator (validation every epoch, as `digits fit` does; logger, checkpoints and progress
//! bar off), alternating the default (flush on) with `flush_denormal=false` in one process. As
//! training converges, gradients and Adam's moments underflow into the subnormal range; a CPU
//! that computes subnormals slowly then slows down epoch after epoch. Per run it prints the fit
//! seconds and the late/early ratio: the mean time of the last 30 epochs over the first 30's.
//! The last line is the default's speed-up over flush off (median fit seconds).

#[path = "common/rounds.rs"]
mod rounds;
use rounds::{median, rounds};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::{Callback, CallbackContext};
use ember::cpu::{CpuAccelerator, CpuBackend};
use ember::{DataModule, Plan, Precision, Stage, Trainer, TrainerOptions};

const EPOCHS: usize = 300;
/// Epochs averaged at each end of the run.
const WINDOW: usize = 30;
/// Epochs of the untimed fit before the rounds.
const WARM_UP_EPOCHS: usize = 5;

/// Records each training epoch's wall time (its validation included), and the first epoch in
/// which the loop's thread met a subnormal float (an underflow or a subnormal input).
#[derive(Default)]
struct Clock {
    started: Option<Instant>,
    epochs: Vec<f64>,
    first_subnormal: Option<usize>,
}

struct EpochClock(Rc<RefCell<Clock>>);

impl Callback for EpochClock {
    fn name(&self) -> &str {
        "EpochClock"
    }

    fn on_train_epoch_start(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.0.borrow_mut().started = Some(Instant::now());
        Ok(())
    }

    fn on_train_epoch_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let mut clock = self.0.borrow_mut();
        if let Some(start) = clock.started.take() {
            clock.epochs.push(start.elapsed().as_secs_f64());
        }
        if clock.first_subnormal.is_none() && ember_core::host_float::take_subnormals_seen() {
            clock.first_subnormal = Some(clock.epochs.len() - 1);
        }
        Ok(())
    }
}

/// One 300-epoch fit: its seconds, epoch times, and final val_acc.
struct Fit {
    seconds: f64,
    epochs: Vec<f64>,
    val_acc: f64,
    /// The first epoch (0-based) in which the loop's thread met a subnormal float.
    first_subnormal: Option<usize>,
}

impl Fit {
    fn late_over_early(&self) -> f64 {
        let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
        mean(&self.epochs[self.epochs.len() - WINDOW..]) / mean(&self.epochs[..WINDOW])
    }
}

/// A fit of `max_epochs` epochs, timed.
fn fit(flush_denormal: Option<bool>, max_epochs: usize) -> anyhow::Result<Fit> {
    let (model, data) = (ModelConfig::default(), DataConfig::default());
    let options = TrainerOptions {
        seed: Some(data.seed),
        max_epochs: Some(max_epochs as u64),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        ..TrainerOptions::default()
    };
    let clock = Rc::new(RefCell::new(Clock::default()));
    let mut plan = Plan::local("cpu", Precision::F32True);
    if let Some(on) = flush_denormal {
        plan.flush_denormal = on;
    }
    let mut trainer = Trainer::<CpuBackend>::new::<CpuAccelerator>(&plan, options)?
        .with_callback(EpochClock(Rc::clone(&clock)));
    let mut data = DigitsData::new(data);
    data.setup(Stage::Fit)?;
    let model = DigitsModel::<CpuBackend>::new(&model, trainer.device());
    ember_core::host_float::take_subnormals_seen();
    let start = Instant::now();
    let out = trainer.fit(model, &mut data)?;
    let seconds = start.elapsed().as_secs_f64();
    let Clock {
        epochs,
        first_subnormal,
        ..
    } = std::mem::take(&mut *clock.borrow_mut());
    anyhow::ensure!(epochs.len() == max_epochs, "{} epochs timed", epochs.len());
    Ok(Fit {
        seconds,
        epochs,
        val_acc: out.metrics["val_acc"],
        first_subnormal,
    })
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(3);
    let sides = [
        ("default (flush on)", None),
        ("flush_denormal=false", Some(false)),
    ];
    let mut seconds = [Vec::new(), Vec::new()];
    let mut ratios = [Vec::new(), Vec::new()];
    // Untimed: the first fit of a process pays for page faults and the allocator's growth,
    // which would land in the first run's early epochs.
    fit(None, WARM_UP_EPOCHS)?;
    for round in 0..rounds {
        // Alternate which side goes first.
        for i in [round % 2, 1 - round % 2] {
            let (name, option) = sides[i];
            let run = fit(option, EPOCHS)?;
            println!(
                "round {round}: {name:<22} {:6.2} s ({:.0} epochs/s), late/early {:.2}, val_acc {:.4}, first subnormal in epoch {}",
                run.seconds,
                EPOCHS as f64 / run.seconds,
                run.late_over_early(),
                run.val_acc,
                run.first_subnormal
                    .map_or("none".to_owned(), |e| e.to_string())
            );
            seconds[i].push(run.seconds);
            ratios[i].push(run.late_over_early());
        }
    }
    println!("PyTorch Lightning: not run (no torch venv here; the LibTorch issue brings one)");
    let [on, off] = seconds.map(median);
    let [ratio_on, ratio_off] = ratios.map(median);
    println!(
        "median of {rounds}: default {on:.2} s (late/early {ratio_on:.2}), flush off {off:.2} s (late/early {ratio_off:.2}); {EPOCHS} epochs of digits on {}",
        cpu_name()
    );
    println!(
        "long-run speed-up of the default over flush off: {:.2}x",
        off / on
    );
    Ok(())
}

/// The CPU's model name (subnormal costs differ between CPU families).
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|name| name.trim().to_owned())
        })
        .unwrap_or_else(|| "this CPU".into())
}
