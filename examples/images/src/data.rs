//! The images example's data: a folder of images, one sub-folder per class, under
//! `--data.root` (`train/` and, when there is one, `val/`), augmented with a random crop and a
//! flip on `--data.num_workers` threads.

use std::path::PathBuf;

use burn::prelude::*;
use burn::tensor::TensorData;
use ember::prelude::*;
use ember::vision::{
    HorizontalFlip, Identity, Image, ImageFolder, Normalize, RandomCrop, ToTensor, Transform,
};
use ember::{FlagError, Stack};

/// The data module, which is the `data` section of the config: each loader lists its folder
/// when the Trainer asks for it.
#[derive(Config, Debug, ConfigDefault)]
pub struct FolderData {
    /// The folder holding `train/<class>/*.png` (and `val/<class>/*.png`).
    #[config(default = "\"data/images\".into()")]
    pub root: PathBuf,
    /// Images per batch.
    #[config(default = 128)]
    pub batch_size: usize,
    /// Threads decoding and augmenting images ahead of the step.
    #[config(default = 0)]
    pub num_workers: usize,
    /// Each channel's mean, subtracted after scaling to [0, 1].
    #[config(default = "[0.5; 3]")]
    pub mean: [f32; 3],
    /// Each channel's deviation, divided by after the mean.
    #[config(default = "[0.25; 3]")]
    pub std: [f32; 3],
}

/// One image as floats `[3, h, w]` and its class.
pub type Item = (TensorData, i64);

impl FolderData {
    /// A loader over the images under `root/split`, each passed through `augment`, then made
    /// floats and normalised.
    fn loader<T>(&self, split: &str, augment: T) -> anyhow::Result<Loader<Item>>
    where
        T: Transform<Image, Output = Image> + 'static,
    {
        let transform = augment
            .then(ToTensor)
            .then(Normalize::new(self.mean, self.std));
        let folder = ImageFolder::open(self.root.join(split))?;
        Ok(Loader::from_source(folder, self.batch_size)
            .map(move |(image, class), key| Ok((transform.apply(image, &mut key.rng())?, class)))
            .num_workers(self.num_workers))
    }
}

impl DataModule for FolderData {
    type Item = Item;
    type Batcher = Stack;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        if !self.root.join("train").is_dir() {
            let allowed =
                "a folder holding train/<class>/ image folders (`images prepare DIR` writes one)";
            let root = self.root.display().to_string();
            return Err(FlagError::new("--data.root", root, allowed).into());
        }
        if self.batch_size == 0 {
            return Err(FlagError::new("--data.batch_size", "0", "an integer > 0").into());
        }
        let augment = RandomCrop::new(32)
            .padding(4)
            .then(HorizontalFlip::new(0.5));
        Ok(Some(self.loader("train", augment)?.shuffled()))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        match self.root.join("val").is_dir() {
            true => Ok(Some(self.loader("val", Identity)?)),
            false => Ok(None),
        }
    }
}
