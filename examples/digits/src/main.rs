//! `digits fit|validate|test|predict`: the digits example's command line.

use std::process::ExitCode;

use digits::job::{DEFAULT_EPOCHS, DEFAULT_SEED, DigitsJob};
use digits::model::ModelConfig;
use digits::train::DataConfig;
use ember::{Cli, TrainerFlags};

fn main() -> ExitCode {
    let registry = ember::registry::<DigitsJob>();
    Cli::new(
        "digits",
        "Train an MLP on 8x8 handwritten digits with ember",
        ModelConfig::default(),
        DataConfig::default(),
    )
    .with_trainer_defaults(
        TrainerFlags::default()
            .max_epochs(DEFAULT_EPOCHS)
            .seed(DEFAULT_SEED),
    )
    .run(&registry, DigitsJob::from)
}
