//! The digits job, with one more accelerator registered in `main`: `--trainer.accelerator=xpu`.

use std::process::ExitCode;

use custom_accelerator::XpuAccelerator;
use digits::job::{DEFAULT_EPOCHS, DigitsJob};
use digits::model::ModelConfig;
use digits::train::DataConfig;
use ember::{Cli, TrainerFlags};

fn main() -> ExitCode {
    let registry = match ember::registry::<DigitsJob>().register::<XpuAccelerator>() {
        Ok(registry) => registry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    Cli::new(
        "custom_accelerator",
        "digits on an accelerator registered by the application",
        ModelConfig::default(),
        DataConfig::default(),
    )
    .with_trainer_defaults(TrainerFlags::default().max_epochs(DEFAULT_EPOCHS))
    .run(&registry, DigitsJob::from)
}
