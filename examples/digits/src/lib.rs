//! The digits example: an MLP (64-256-256-10, ReLU) trained with Adam on 8×8 handwritten digits.

pub mod data;
pub mod model;
pub mod train;

use ember::prelude::*;

use crate::data::DigitsData;
use crate::model::{DigitsModel, ModelConfig};

/// Epochs when `--trainer.max_epochs` is not given.
pub const DEFAULT_EPOCHS: u64 = 30;
/// Seed when `--trainer.seed` is not given.
pub const DEFAULT_SEED: u64 = 42;

/// The digits application: what `ember::run` needs to train, validate, test and predict.
pub struct Digits;

impl App for Digits {
    const NAME: &'static str = "digits";
    const ABOUT: &'static str = "Train an MLP on 8x8 handwritten digits with ember";
    type ModelConfig = ModelConfig;
    type Data = DigitsData;
    type Model<B: AutodiffBackend> = DigitsModel<B>;

    fn model<B: AutodiffBackend>(config: &ModelConfig, device: &B::Device) -> DigitsModel<B> {
        DigitsModel::new(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        TrainerFlags::default()
            .max_epochs(DEFAULT_EPOCHS)
            .seed(DEFAULT_SEED)
    }
}
