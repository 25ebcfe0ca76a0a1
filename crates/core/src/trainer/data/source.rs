//! Where a loader's items come from: a [`DataSource`] makes item `index` knowing the run's seed
//! and the epoch ([`ItemKey`]), and may fail with an error of its own.

use std::sync::Arc;

use anyhow::Context;
use burn::data::dataset::Dataset;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Which item is being made, and when: the Trainer's seed, the epoch and the item's index in
/// the data source. A random augmentation draws from [`rng`](Self::rng), so an item is the
/// same whichever worker makes it, however many workers there are, and when a run resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemKey {
    /// The Trainer's seed (`--trainer.seed`).
    pub seed: u64,
    /// The epoch (0 for validation, test and predict passes).
    pub epoch: u64,
    /// The item's index in its data source.
    pub index: usize,
}

impl ItemKey {
    /// A generator seeded by this key alone.
    pub fn rng(&self) -> StdRng {
        let z = self.seed
            ^ self.epoch.wrapping_mul(0xD6E8_FEB8_6659_FD93)
            ^ (self.index as u64).wrapping_mul(0xA076_1D64_78BD_642F);
        StdRng::seed_from_u64(mix64(z))
    }
}

/// SplitMix64's finaliser: a 64-bit value whose bits all depend on every bit of `z`.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The items a [`Loader`](super::Loader) batches: `len` of them, item `key.index` made on
/// demand (read, decoded, augmented), perhaps on a worker thread.
///
/// Any burn `Dataset` is one through [`Loader::new`](super::Loader::new); implement this
/// trait for a source whose items can fail to be made (a file that does not decode) or that
/// draw randomness ([`ItemKey::rng`]). An error reaches the user as it is, with the item's
/// index and the loader's name around it.
pub trait DataSource<I>: Send + Sync {
    /// Items in the source.
    fn len(&self) -> usize;

    /// Whether the source has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `key.index`.
    fn get(&self, key: ItemKey) -> anyhow::Result<I>;
}

impl<I, S: DataSource<I> + ?Sized> DataSource<I> for Arc<S> {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<I> {
        (**self).get(key)
    }
}

/// A burn `Dataset` as a data source: an item it does not have is an error.
pub(crate) struct FromDataset<D>(pub(crate) D);

impl<I, D: Dataset<I>> DataSource<I> for FromDataset<D> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<I> {
        (self.0.get(key.index))
            .with_context(|| format!("the dataset has no item {} (len {})", key.index, self.len()))
    }
}

/// A source whose items pass through `map` as they are made.
pub(crate) struct Mapped<I, F> {
    pub(crate) source: Arc<dyn DataSource<I>>,
    pub(crate) map: F,
}

impl<I, O, F> DataSource<O> for Mapped<I, F>
where
    F: Fn(I, &ItemKey) -> anyhow::Result<O> + Send + Sync,
{
    fn len(&self) -> usize {
        self.source.len()
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<O> {
        (self.map)(self.source.get(key)?, &key)
    }
}
