//! What a model author needs, in one import: `use ember::prelude::*;` (beside
//! `use burn::prelude::*;` for burn's tensors and modules).

pub use burn::tensor::backend::AutodiffBackend;
pub use ember_derive::ConfigDefault;

pub use crate::app::{App, InitModel};
pub use crate::flags::TrainerFlags;
pub use crate::stage::Stage;
pub use crate::trainer::Trainer;
pub use crate::trainer::data::{
    DataLoaders, DataModule, DataSource, FromDataModule, ItemKey, Loader,
};
pub use crate::trainer::hparams::Hparams;
pub use crate::trainer::log::{LogOptions, StepLog};
pub use crate::trainer::loops::step::ManualOptimization;
pub use crate::trainer::module::{
    ConfiguredOptimizers, EpochEnd, LightningModule, Manual, Optimizers, Prediction,
    SchedulerInterval, TrainingModule,
};
pub use crate::trainer::stack::Stack;
