//! The digits data set: loading, a stratified split, and batches.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use ember::{DataModule, Loader, Stage};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::train::DataConfig;

/// Pixels per image (8×8).
pub const PIXELS: usize = 64;
/// Classes (digits 0..9).
pub const CLASSES: usize = 10;

/// The shipped data set, compiled in so the example runs from any directory.
static SHIPPED: &[u8] = include_bytes!("../data/digits.csv.gz");

/// Images with pixels scaled to 0..1, and their labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Digits {
    /// Row-major pixels, `PIXELS` per image.
    pub pixels: Vec<f32>,
    /// One label per image.
    pub labels: Vec<u8>,
}

impl Digits {
    /// The data set shipped with the example.
    pub fn shipped() -> anyhow::Result<Self> {
        Self::from_gzip(SHIPPED).context("reading the shipped digits.csv.gz")
    }

    /// Loads a `.csv.gz` file in the shipped format.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_gzip(&bytes).with_context(|| format!("parsing {}", path.display()))
    }

    fn from_gzip(bytes: &[u8]) -> anyhow::Result<Self> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(bytes).read_to_string(&mut text)?;
        let mut digits = Digits::default();
        for (line_no, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let values: Vec<u8> = line
                .split(',')
                .map(|v| v.trim().parse::<u8>())
                .collect::<Result<_, _>>()
                .with_context(|| format!("line {}: not a list of integers", line_no + 1))?;
            if values.len() != PIXELS + 1
                || values[PIXELS] as usize >= CLASSES
                || values[..PIXELS].iter().any(|&p| p > 16)
            {
                bail!(
                    "line {}: expected 64 pixels in 0..=16 and a label in 0..=9",
                    line_no + 1
                );
            }
            digits
                .pixels
                .extend(values[..PIXELS].iter().map(|&p| f32::from(p) / 16.0));
            digits.labels.push(values[PIXELS]);
        }
        Ok(digits)
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Digits {
        let mut out = Digits::default();
        for &i in indices {
            out.pixels
                .extend_from_slice(&self.pixels[i * PIXELS..(i + 1) * PIXELS]);
            out.labels.push(self.labels[i]);
        }
        out
    }

    /// A stratified split: `val_fraction` of each class goes to validation, chosen by `seed`.
    pub fn split(&self, val_fraction: f64, seed: u64) -> (Digits, Digits) {
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut train, mut val) = (Vec::new(), Vec::new());
        for class in 0..CLASSES as u8 {
            let mut members: Vec<usize> = (0..self.len())
                .filter(|&i| self.labels[i] == class)
                .collect();
            members.shuffle(&mut rng);
            let n_val = (members.len() as f64 * val_fraction).round() as usize;
            val.extend_from_slice(&members[..n_val]);
            train.extend_from_slice(&members[n_val..]);
        }
        train.sort_unstable();
        val.sort_unstable();
        (self.select(&train), self.select(&val))
    }
}

/// One image and its label.
#[derive(Debug, Clone, PartialEq)]
pub struct DigitItem {
    /// Pixels scaled to 0..1.
    pub pixels: [f32; PIXELS],
    /// The digit.
    pub label: u8,
}

impl Digits {
    /// The images as dataset items.
    pub fn items(&self) -> Vec<DigitItem> {
        self.pixels
            .chunks_exact(PIXELS)
            .zip(&self.labels)
            .map(|(p, &label)| DigitItem {
                pixels: p.try_into().expect("PIXELS values"),
                label,
            })
            .collect()
    }
}

/// A batch: images `[n, 64]` and labels `[n]`.
#[derive(Debug, Clone)]
pub struct DigitsBatch<B: Backend> {
    /// Pixels.
    pub images: Tensor<B, 2>,
    /// Labels.
    pub labels: Tensor<B, 1, Int>,
}

/// The images and labels of `data` at `indices` as one batch.
pub fn batch_of<B: Backend>(
    data: &Digits,
    indices: &[usize],
    device: &B::Device,
) -> DigitsBatch<B> {
    let mut pixels = Vec::with_capacity(indices.len() * PIXELS);
    let mut labels = Vec::with_capacity(indices.len());
    for &i in indices {
        pixels.extend_from_slice(&data.pixels[i * PIXELS..(i + 1) * PIXELS]);
        labels.push(i64::from(data.labels[i]));
    }
    DigitsBatch {
        images: Tensor::from_data(TensorData::new(pixels, [indices.len(), PIXELS]), device),
        labels: Tensor::from_data(TensorData::new(labels, [indices.len()]), device),
    }
}

/// Stacks items into a [`DigitsBatch`] on any backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct DigitsBatcher;

impl<B: Backend> Batcher<B, DigitItem, DigitsBatch<B>> for DigitsBatcher {
    fn batch(&self, items: Vec<DigitItem>, device: &B::Device) -> DigitsBatch<B> {
        let mut pixels = Vec::with_capacity(items.len() * PIXELS);
        let mut labels = Vec::with_capacity(items.len());
        for item in &items {
            pixels.extend_from_slice(&item.pixels);
            labels.push(i64::from(item.label));
        }
        DigitsBatch {
            images: Tensor::from_data(TensorData::new(pixels, [items.len(), PIXELS]), device),
            labels: Tensor::from_data(TensorData::new(labels, [items.len()]), device),
        }
    }
}

/// The digits data module: a stratified train/val split of the shipped (or a given) file.
/// Validation, test and predict all use the held-out split. The `data` section of the
/// config is its [`DataConfig`]; the split it loads in `setup` is not part of it.
#[derive(Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DigitsData {
    config: DataConfig,
    #[serde(skip)]
    train: Option<Arc<InMemDataset<DigitItem>>>,
    #[serde(skip)]
    val: Option<Arc<InMemDataset<DigitItem>>>,
}

impl DigitsData {
    /// A data module for this config (nothing is read before `setup`).
    pub fn new(config: DataConfig) -> Self {
        Self {
            config,
            train: None,
            val: None,
        }
    }

    fn loader(&self, set: &Option<Arc<InMemDataset<DigitItem>>>) -> Option<Loader<DigitItem>> {
        let set = Arc::clone(set.as_ref()?);
        Some(Loader::new(set, self.config.batch_size).num_workers(self.config.num_workers))
    }
}

impl DataModule for DigitsData {
    type Item = DigitItem;
    type Batcher = DigitsBatcher;

    fn setup(&mut self, _stage: Stage) -> anyhow::Result<()> {
        if self.train.is_none() {
            let (train, val) = self.config.load()?;
            self.train = Some(Arc::new(InMemDataset::new(train.items())));
            self.val = Some(Arc::new(InMemDataset::new(val.items())));
        }
        Ok(())
    }

    fn train_loader(&self) -> anyhow::Result<Option<Loader<DigitItem>>> {
        Ok(self.loader(&self.train).map(Loader::shuffled))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<DigitItem>>> {
        Ok(self.loader(&self.val))
    }

    fn test_loader(&self) -> anyhow::Result<Option<Loader<DigitItem>>> {
        Ok(self.loader(&self.val))
    }

    fn predict_loader(&self) -> anyhow::Result<Option<Loader<DigitItem>>> {
        Ok(self.loader(&self.val))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_data_has_1797_labelled_images() {
        let d = Digits::shipped().unwrap();
        assert_eq!(d.len(), 1797);
        assert_eq!(d.pixels.len(), 1797 * PIXELS);
        assert!(d.pixels.iter().all(|p| (0.0..=1.0).contains(p)));
    }

    #[test]
    fn split_is_stratified_disjoint_and_seeded() {
        let d = Digits::shipped().unwrap();
        let (train, val) = d.split(0.2, 7);
        assert_eq!(train.len() + val.len(), d.len());
        for class in 0..CLASSES as u8 {
            let total = d.labels.iter().filter(|&&l| l == class).count() as f64;
            let in_val = val.labels.iter().filter(|&&l| l == class).count() as f64;
            assert!((in_val / total - 0.2).abs() < 0.02, "class {class}");
        }
        assert_eq!(d.split(0.2, 7), (train, val));
        assert_ne!(d.split(0.2, 8).1, d.split(0.2, 7).1);
    }
}
