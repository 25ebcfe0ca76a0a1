//! `out_of_step fit --trainer.strategy=one_sided`: the wide MLP under ddp, except that after
//! optimizer step 3 rank 1 alone makes one more collective call (a barrier), as a plugin whose
//! hook runs on some ranks only would. The run ends with ember's message naming each rank's
//! call, not the transport's error.

use std::process::ExitCode;

use ember::burn::tensor::backend::AutodiffBackend;
use ember::plugins::{Ddp, Gradients, Strategy, StrategyInfo, StrategyParts, Weights};
use ember::{App, AppJob, Registry, RegistryError, TrainerFlags};
use ember_acceptance::wide::WideSgd;

/// ddp with one rank's extra barrier after step 3.
struct OneSided(Ddp);

impl Strategy for OneSided {
    fn name(&self) -> &str {
        "one_sided"
    }
    fn parts(&self) -> &StrategyParts {
        self.0.parts()
    }
    fn parts_mut(&mut self) -> &mut StrategyParts {
        self.0.parts_mut()
    }
    fn setup_weights(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.0.setup_weights(weights)
    }
    fn reduce_gradients(&mut self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        self.0.reduce_gradients(grads)
    }
    fn on_optimizer_step(&mut self, weights: &mut dyn Weights, step: u64) -> anyhow::Result<()> {
        if step == 3 && self.collective().rank() == 1 {
            self.collective().barrier()?;
        }
        self.0.on_optimizer_step(weights, step)
    }
}

struct OutOfStep;

impl App for OutOfStep {
    const NAME: &'static str = "out_of_step";
    const ABOUT: &'static str =
        "A wide MLP whose strategy makes one collective call on rank 1 only";
    type ModelConfig = <WideSgd as App>::ModelConfig;
    type Data = <WideSgd as App>::Data;
    type Model<B: AutodiffBackend> = <WideSgd as App>::Model<B>;

    fn model<B: AutodiffBackend>(config: &Self::ModelConfig, device: &B::Device) -> Self::Model<B> {
        WideSgd::model(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        WideSgd::trainer_defaults()
    }

    fn register(registry: Registry<AppJob<Self>>) -> Result<Registry<AppJob<Self>>, RegistryError> {
        registry.register_strategy(
            StrategyInfo::new("one_sided", "ddp with a barrier on rank 1 only", true),
            |parts| Ok(Box::new(OneSided(Ddp::new(parts)))),
        )
    }
}

fn main() -> ExitCode {
    ember::run::<OutOfStep>()
}
