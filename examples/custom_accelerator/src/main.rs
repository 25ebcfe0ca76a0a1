//! The digits app, with one more accelerator registered in `main`: `--trainer.accelerator=xpu`.

use std::process::ExitCode;

use custom_accelerator::XpuAccelerator;
use digits::Digits;
use digits::data::DigitsData;
use digits::model::ModelConfig;
use ember::{App, AppJob, Cli};

fn main() -> ExitCode {
    let registry = match ember::registry::<AppJob<Digits>>().register::<XpuAccelerator>() {
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
        DigitsData::default(),
    )
    .with_trainer_defaults(Digits::trainer_defaults())
    .run(&registry, AppJob::from)
}
