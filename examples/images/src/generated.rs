//! Generated 32×32 RGB images in memory, for measuring and testing image models without a
//! data set on disk: each class has a fixed random pattern, and each image is its class's
//! pattern plus uniform noise of half its amplitude, so a model can learn them. The same seed gives the same images.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::prelude::*;
use ember::prelude::*;

use crate::model::ImageBatch;

/// Channels of every image.
pub const CHANNELS: usize = 3;

/// How many images, of what size, in batches of what size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImagesConfig {
    /// Training images.
    pub train: usize,
    /// Validation images.
    pub val: usize,
    /// Height and width.
    pub side: usize,
    /// Classes.
    pub classes: usize,
    /// Images per batch.
    pub batch_size: usize,
    /// Seed of the patterns and the noise.
    pub seed: u64,
}

impl Default for ImagesConfig {
    fn default() -> Self {
        Self {
            train: 4096,
            val: 512,
            side: 32,
            classes: 10,
            batch_size: 128,
            seed: 7,
        }
    }
}

/// One image, channels first (`[3, side, side]` flattened), and its class.
#[derive(Debug, Clone)]
pub struct ImageItem {
    /// Pixels.
    pub pixels: Vec<f32>,
    /// Class.
    pub label: u8,
}

/// Stacks [`ImageItem`]s (square, 3 channels) into an [`ImageBatch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageBatcher;

impl<B: Backend> Batcher<B, ImageItem, ImageBatch<B>> for ImageBatcher {
    fn batch(&self, items: Vec<ImageItem>, device: &B::Device) -> ImageBatch<B> {
        let per_image = items.first().map_or(CHANNELS, |item| item.pixels.len());
        let side = ((per_image / CHANNELS) as f64).sqrt() as usize;
        let n = items.len();
        let pixels: Vec<f32> = items.iter().flat_map(|item| item.pixels.clone()).collect();
        let labels: Vec<i64> = items.iter().map(|item| i64::from(item.label)).collect();
        (
            Tensor::from_data(TensorData::new(pixels, [n, CHANNELS, side, side]), device),
            Tensor::from_data(TensorData::new(labels, [n]), device),
        )
    }
}

/// A deterministic stream of uniform numbers in [-1, 1) (SplitMix64).
struct Uniform(u64);

impl Uniform {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

impl ImagesConfig {
    /// The training and validation images.
    pub fn generate(&self) -> (Vec<ImageItem>, Vec<ImageItem>) {
        let per_image = CHANNELS * self.side * self.side;
        let mut random = Uniform(self.seed);
        let patterns: Vec<Vec<f32>> = (0..self.classes)
            .map(|_| (0..per_image).map(|_| random.next()).collect())
            .collect();
        let mut images = (0..self.train + self.val).map(|i| {
            let label = i % self.classes;
            let pixels = patterns[label]
                .iter()
                .map(|p| p + 0.5 * random.next())
                .collect();
            ImageItem {
                pixels,
                label: label as u8,
            }
        });
        let train = images.by_ref().take(self.train).collect();
        (train, images.collect())
    }
}

/// The data module of [`ImagesConfig`]'s images; validation, test and predict use the
/// validation images.
#[derive(Default)]
pub struct GeneratedImages {
    config: ImagesConfig,
    train: Option<Arc<InMemDataset<ImageItem>>>,
    val: Option<Arc<InMemDataset<ImageItem>>>,
}

impl GeneratedImages {
    /// A data module that generates `config`'s images in `setup`.
    pub fn new(config: ImagesConfig) -> Self {
        Self {
            config,
            train: None,
            val: None,
        }
    }

    fn loader(&self, set: &Option<Arc<InMemDataset<ImageItem>>>) -> Option<Loader<ImageItem>> {
        let set = Arc::clone(set.as_ref()?);
        Some(Loader::new(set, self.config.batch_size))
    }
}

impl DataModule for GeneratedImages {
    type Item = ImageItem;
    type Batcher = ImageBatcher;

    fn setup(&mut self, _stage: Stage) -> anyhow::Result<()> {
        if self.train.is_none() {
            let (train, val) = self.config.generate();
            self.train = Some(Arc::new(InMemDataset::new(train)));
            self.val = Some(Arc::new(InMemDataset::new(val)));
        }
        Ok(())
    }

    fn train_loader(&self) -> anyhow::Result<Option<Loader<ImageItem>>> {
        Ok(self.loader(&self.train).map(Loader::shuffled))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<ImageItem>>> {
        Ok(self.loader(&self.val))
    }

    fn test_loader(&self) -> anyhow::Result<Option<Loader<ImageItem>>> {
        Ok(self.loader(&self.val))
    }

    fn predict_loader(&self) -> anyhow::Result<Option<Loader<ImageItem>>> {
        Ok(self.loader(&self.val))
    }
}
