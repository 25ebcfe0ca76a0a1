//! What the Trainer costs over a hand-written burn loop: the same model (digits MLP), the same
//! batches (same seed, same shuffles), the same optimizer (Adam), alternating in one process.
//!
//! `cargo xtask bench overhead [ROUNDS]`. Rounds alternate which side runs first. Both sides only train (no validation, no files, no
//! progress bar), so the difference is the Trainer's loop, logging and hooks. The last line is
//! `overhead ratio: X.XXX`: the Trainer's time per step over the hand loop's (medians).

#[path = "common/rounds.rs"]
mod rounds;
use rounds::{median, rounds};
use std::time::Instant;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::{DataConfig, train_by_hand};
use ember::options::Limit;
use ember::{DataModule, Stage, Trainer, TrainerOptions};

type B = Autodiff<Flex>;
const EPOCHS: u64 = 30;

/// Seconds per step and steps of one Trainer fit.
fn trainer_run(model: &ModelConfig, data: &DataConfig) -> anyhow::Result<(f64, u64)> {
    let options = TrainerOptions {
        seed: Some(data.seed),
        max_epochs: Some(EPOCHS),
        limit_val_batches: Limit::Batches(0),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: Vec::new(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?;
    let mut data = DigitsData::new(data.clone());
    data.setup(Stage::Fit)?; // the hand loop's clock also starts after loading
    let model = DigitsModel::<B>::new(model, trainer.device());
    let start = Instant::now();
    let out = trainer.fit(model, &mut data)?;
    Ok((
        start.elapsed().as_secs_f64() / out.global_step as f64,
        out.global_step,
    ))
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(7);
    let (model, data) = (ModelConfig::default(), DataConfig::default());
    let (mut ours, mut hand) = (Vec::new(), Vec::new());
    // One untimed round of each warms caches and the allocator.
    trainer_run(&model, &data)?;
    train_by_hand::<B>(&FlexDevice, &model, &data, EPOCHS as usize)?;
    for round in 0..rounds {
        // Alternate which side goes first, so neither always runs on a warmer cache.
        let hand_first = round % 2 == 1;
        let early_hand =
            hand_first.then(|| train_by_hand::<B>(&FlexDevice, &model, &data, EPOCHS as usize));
        let (t, steps) = trainer_run(&model, &data)?;
        let (_, h) = match early_hand {
            Some(h) => h?,
            None => train_by_hand::<B>(&FlexDevice, &model, &data, EPOCHS as usize)?,
        };
        let h_per_step = h.seconds / h.steps as f64;
        println!(
            "round {round}: trainer {:.0} steps/s, hand loop {:.0} steps/s ({steps} steps each)",
            1.0 / t,
            1.0 / h_per_step
        );
        ours.push(t);
        hand.push(h_per_step);
    }
    let (t, h) = (median(ours), median(hand));
    println!(
        "median steps/s: trainer {:.0}, hand loop {:.0} ({EPOCHS} epochs of digits, batch 64, MLP 64-256-256-10, Adam, Autodiff<Flex>)",
        1.0 / t,
        1.0 / h
    );
    println!("overhead ratio: {:.3}", t / h);
    Ok(())
}
