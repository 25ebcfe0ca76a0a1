//! The images example: a small ResNet ([`model`]) trained from a folder of 32×32 RGB images
//! ([`data`]), with a random crop and a flip made by data workers. `images prepare DIR` writes
//! such a folder ([`prepare`]); [`generated`] makes images in memory for benchmarks and tests.

pub mod data;
pub mod generated;
pub mod model;
pub mod prepare;

use burn::tensor::backend::AutodiffBackend;
use ember::prelude::*;

use data::FolderData;
use model::{ResNet, ResNetConfig};

/// The images application.
pub struct Images;

impl App for Images {
    const NAME: &'static str = "images";
    const ABOUT: &'static str = "Train a small ResNet on a folder of 32x32 RGB images with ember (`images prepare DIR` writes one)";
    type ModelConfig = ResNetConfig;
    type Data = FolderData;
    type Model<B: AutodiffBackend> = ResNet<B>;

    fn model<B: AutodiffBackend>(config: &ResNetConfig, device: &B::Device) -> ResNet<B> {
        ResNet::new(config, device)
    }

    fn trainer_defaults() -> TrainerFlags {
        TrainerFlags::default().max_epochs(10).seed(42)
    }
}
