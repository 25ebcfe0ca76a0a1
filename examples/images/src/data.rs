//! The images example's data: a folder of images, one sub-folder per class, under
//! `--data.root` (`train/` and, when there is one, `val/`), augmented with a random crop and a
//! flip on `--data.num_workers` threads.

use std::path::PathBuf;
use std::sync::Arc;

use burn::tensor::TensorData;
use ember::prelude::*;
use ember::vision::{HorizontalFlip, ImageFolder, Normalize, RandomCrop, ToTensor, Transform};
use ember::{FlagError, Stack};
use serde::{Deserialize, Serialize};

/// The `data` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// The folder holding `train/<class>/*.png` (and `val/<class>/*.png`).
    pub root: PathBuf,
    /// Images per batch.
    pub batch_size: usize,
    /// Threads decoding and augmenting images ahead of the step.
    pub num_workers: usize,
    /// Each channel's mean, subtracted after scaling to [0, 1].
    pub mean: [f32; 3],
    /// Each channel's deviation, divided by after the mean.
    pub std: [f32; 3],
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            root: PathBuf::from("data/images"),
            batch_size: 128,
            num_workers: 0,
            mean: [0.5; 3],
            std: [0.25; 3],
        }
    }
}

/// One image as floats `[3, h, w]` and its class.
pub type Item = (TensorData, i64);

/// The data module: the image folders `setup` finds under the config's root.
#[derive(Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FolderData {
    config: DataConfig,
    #[serde(skip)]
    folders: Option<(Arc<ImageFolder>, Option<Arc<ImageFolder>>)>,
}

impl FolderData {
    /// A data module for this config (the folders are listed in `setup`).
    pub fn new(config: DataConfig) -> Self {
        Self {
            config,
            folders: None,
        }
    }

    /// A loader over `folder` whose images pass through `augment`.
    fn loader(
        &self,
        folder: &Arc<ImageFolder>,
        augment: impl Transform<ember::vision::Image, Output = TensorData> + 'static,
    ) -> Loader<Item> {
        Loader::from_source(Arc::clone(folder), self.config.batch_size)
            .map(move |(image, class), key| Ok((augment.apply(image, &mut key.rng())?, class)))
            .num_workers(self.config.num_workers)
    }

    fn normalize(&self) -> Normalize {
        Normalize::new(self.config.mean, self.config.std)
    }
}

impl DataModule for FolderData {
    type Item = Item;
    type Batcher = Stack;

    fn setup(&mut self, _stage: Stage) -> anyhow::Result<()> {
        if self.folders.is_some() {
            return Ok(());
        }
        let root = &self.config.root;
        if !root.join("train").is_dir() {
            let allowed =
                "a folder holding train/<class>/ image folders (`images prepare DIR` writes one)";
            return Err(FlagError::new("--data.root", root.display().to_string(), allowed).into());
        }
        if self.config.batch_size == 0 {
            return Err(FlagError::new("--data.batch_size", "0", "an integer > 0").into());
        }
        let train = Arc::new(ImageFolder::open(root.join("train"))?);
        let val = root.join("val");
        let val = match val.is_dir() {
            true => Some(Arc::new(ImageFolder::open(val)?)),
            false => None,
        };
        self.folders = Some((train, val));
        Ok(())
    }

    fn train_loader(&self) -> Option<Loader<Item>> {
        let (train, _) = self.folders.as_ref()?;
        let augment = RandomCrop::new(32)
            .padding(4)
            .then(HorizontalFlip::new(0.5))
            .then(ToTensor)
            .then(self.normalize());
        Some(self.loader(train, augment).shuffled())
    }

    fn val_loader(&self) -> Option<Loader<Item>> {
        let (_, val) = self.folders.as_ref()?;
        Some(self.loader(val.as_ref()?, ToTensor.then(self.normalize())))
    }
}
