//! Flex vs NdArray on the digits model: the same hand-written loop, alternating runs.
//!
//! `cargo xtask bench cpu-backends [ROUNDS]`. Prints steps/s per run and per backend; the last
//! line is `flex/ndarray speed: X.XXx` (Flex steps/s over NdArray's, medians).

#[path = "common/rounds.rs"]
mod rounds;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use burn_ndarray::{NdArray, NdArrayDevice};
use digits::model::ModelConfig;
use digits::train::{DataConfig, fit_by_hand};
use rounds::{median, rounds};

const EPOCHS: usize = 10;

fn main() -> anyhow::Result<()> {
    let rounds = rounds(5);
    let (model, data) = (ModelConfig::default(), DataConfig::default());
    let (mut flex, mut ndarray) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let (_, f) = fit_by_hand::<Autodiff<Flex>>(&FlexDevice, &model, &data, EPOCHS, |_, _| {})?;
        let (_, n) = fit_by_hand::<Autodiff<NdArray>>(
            &NdArrayDevice::Cpu,
            &model,
            &data,
            EPOCHS,
            |_, _| {},
        )?;
        println!(
            "round {round}: flex {:.0} steps/s (val_acc {:.3}), ndarray {:.0} steps/s (val_acc {:.3})",
            f.steps_per_second(),
            f.val_accuracy.last().unwrap_or(&0.0),
            n.steps_per_second(),
            n.val_accuracy.last().unwrap_or(&0.0)
        );
        flex.push(f.steps_per_second());
        ndarray.push(n.steps_per_second());
    }
    let (f, n) = (median(flex), median(ndarray));
    println!(
        "median steps/s: flex {f:.0}, ndarray {n:.0} ({EPOCHS} epochs of digits, batch 64, MLP 64-256-256-10, Adam)"
    );
    println!("flex/ndarray speed: {:.2}x", f / n);
    Ok(())
}
