//! Data modules and loaders on burn's `Dataset` and `Batcher` types.
//!
//! A loader here is a recipe (dataset, batch size, shuffle, drop_last); the Trainer turns it
//! into batches in a seeded order that depends only on the seed and the epoch, so a run is
//! reproducible and a later issue can shard and resume it.

use std::cell::Cell;
use std::sync::Arc;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::{Dataset, InMemDataset};
use burn::tensor::backend::Backend;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::plugins::shard::Shard;
use crate::stage::Stage;

/// How to batch one dataset.
pub struct Loader<I> {
    /// The items.
    pub dataset: Arc<dyn Dataset<I>>,
    /// Items per batch.
    pub batch_size: usize,
    /// Shuffle every epoch (seeded by the Trainer's seed and the epoch).
    pub shuffle: bool,
    /// Drop a last batch smaller than `batch_size`.
    pub drop_last: bool,
    /// The share of each epoch this process batches (all of it unless the run is distributed).
    pub shard: Shard,
}

impl<I> Clone for Loader<I> {
    fn clone(&self) -> Self {
        Self {
            dataset: Arc::clone(&self.dataset),
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
            shard: self.shard,
        }
    }
}

impl<I> Loader<I> {
    /// A loader over `dataset` (any burn `Dataset`: an `InMemDataset`, an `Arc` of one ...) in
    /// its own order.
    pub fn new(dataset: impl Dataset<I> + 'static, batch_size: usize) -> Self {
        Self {
            dataset: Arc::new(dataset),
            batch_size,
            shuffle: false,
            drop_last: false,
            shard: Shard::WHOLE,
        }
    }

    /// A loader over `items`, held in memory (burn's `InMemDataset`), in their order:
    /// `Loader::in_memory((0..1000).map(sample), 32)`.
    pub fn in_memory(items: impl IntoIterator<Item = I>, batch_size: usize) -> Self
    where
        I: Clone + Send + Sync + 'static,
    {
        Self::new(InMemDataset::new(items.into_iter().collect()), batch_size)
    }

    /// This loader, or an error naming it (`which`: train, val, test, predict) when it cannot
    /// make a batch: a batch size of 0.
    pub(crate) fn checked(self, which: &str) -> anyhow::Result<Self> {
        self.checked_as(which, &format!("{which}_loader"))
    }

    /// Every loader of `loaders` checked as [`checked`](Self::checked) does (naming the index
    /// of one among several) and sharded by `shard`.
    pub(crate) fn checked_all(
        loaders: Vec<Self>,
        which: &str,
        shard: Shard,
    ) -> anyhow::Result<Vec<Self>> {
        let several = loaders.len() > 1;
        (loaders.into_iter().enumerate())
            .map(|(i, loader)| {
                let checked = match several {
                    true => loader.checked_as(&format!("{which} {i}"), &format!("{which}_loaders")),
                    false => loader.checked(which),
                };
                Ok(checked?.sharded(shard))
            })
            .collect()
    }

    fn checked_as(self, name: &str, method: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            self.batch_size > 0,
            "the {name} loader (DataModule::{method}) has batch_size 0; a batch needs at least 1 item"
        );
        Ok(self)
    }

    /// Batches only `shard`'s items of each epoch.
    pub fn sharded(mut self, shard: Shard) -> Self {
        self.shard = shard;
        self
    }

    /// The loader of a process that drives `devices` devices, each taking `batch_size` items
    /// per step: batches of `batch_size` × `devices`.
    pub fn for_devices(mut self, devices: usize) -> Self {
        self.batch_size *= devices;
        self
    }

    /// Shuffles every epoch.
    pub fn shuffled(mut self) -> Self {
        self.shuffle = true;
        self
    }

    /// Drops a short last batch.
    pub fn drop_last(mut self) -> Self {
        self.drop_last = true;
        self
    }

    /// Batches per epoch (of this loader's shard).
    pub fn num_batches(&self) -> usize {
        let n = self.shard.items(self.dataset.len());
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// The item indices of each batch of `epoch` (of this loader's shard), in order.
    pub fn batch_indices(&self, seed: u64, epoch: u64) -> Vec<Vec<usize>> {
        let order = if self.shuffle {
            epoch_permutation(self.dataset.len(), seed, epoch)
        } else {
            (0..self.dataset.len()).collect()
        };
        self.shard
            .take(&order)
            .chunks(self.batch_size)
            .take(self.num_batches())
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// The batch of these item indices, made by `batcher` on `device`.
    pub fn batch<B: Backend, O>(
        &self,
        batcher: &impl Batcher<B, I, O>,
        indices: &[usize],
        device: &B::Device,
    ) -> anyhow::Result<O> {
        let items = indices
            .iter()
            .map(|&i| {
                self.dataset.get(i).with_context(|| {
                    format!("dataset has no item {i} (len {})", self.dataset.len())
                })
            })
            .collect::<anyhow::Result<Vec<I>>>()?;
        Ok(making_batch(items.len(), || batcher.batch(items, device)))
    }
}

thread_local! {
    /// The item count of the batch this thread's batcher is making.
    static BATCHING: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `make` as the making of a batch of `items` items: [`batching`] says so on this thread
/// until it returns (or unwinds). The Trainer's loaders make every batch this way.
pub fn making_batch<T>(items: usize, make: impl FnOnce() -> T) -> T {
    /// Restores the value before, also when `make` panics.
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BATCHING.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BATCHING.with(|b| b.replace(Some(items))));
    make()
}

/// The item count of the batch this thread's batcher is making, while it makes it: a backend
/// that splits every batch over several devices (xla's device spanning several) tells the
/// batch's tensors, whose first dimension is this count, from the model's, which every device
/// holds whole.
pub fn batching() -> Option<usize> {
    BATCHING.with(Cell::get)
}

/// The data side of a run (Lightning's LightningDataModule): where each loop's items come
/// from and how they become batches.
pub trait DataModule {
    /// One item of the datasets.
    type Item: Send + Sync + 'static;
    /// Turns items into batches on any backend the model needs. A `Default` batcher needs
    /// nothing more; one that needs the data module's state (a vocabulary, statistics)
    /// implements [`FromDataModule`] for this data module.
    type Batcher: FromDataModule<Self>;

    /// Prepares what `stage` needs (load files, split ...). Called once per Trainer entry point.
    fn setup(&mut self, stage: Stage) -> anyhow::Result<()> {
        let _ = stage;
        Ok(())
    }

    /// The training loader.
    fn train_loader(&self) -> Option<Loader<Self::Item>>;

    /// The validation loader.
    fn val_loader(&self) -> Option<Loader<Self::Item>> {
        None
    }

    /// The test loader.
    fn test_loader(&self) -> Option<Loader<Self::Item>> {
        None
    }

    /// The predict loader.
    fn predict_loader(&self) -> Option<Loader<Self::Item>> {
        None
    }

    /// Every validation loader, in `dataloader_idx` order; by default the one
    /// [`val_loader`](Self::val_loader) gives. A data module with several overrides this one:
    /// each is run in turn, and with more than one the metrics a step logs are named
    /// `NAME/dataloader_idx_N` (see `LogOptions::add_dataloader_idx`).
    fn val_loaders(&self) -> Vec<Loader<Self::Item>> {
        self.val_loader().into_iter().collect()
    }

    /// Every test loader, as [`val_loaders`](Self::val_loaders).
    fn test_loaders(&self) -> Vec<Loader<Self::Item>> {
        self.test_loader().into_iter().collect()
    }

    /// Every predict loader, as [`val_loaders`](Self::val_loaders); `Trainer::predict_each`
    /// returns one list of predictions per loader.
    fn predict_loaders(&self) -> Vec<Loader<Self::Item>> {
        self.predict_loader().into_iter().collect()
    }
}

/// How a data module's batcher is made, once per Trainer entry point (after
/// [`DataModule::setup`]). Every `Default` type has it (the default value); a batcher built
/// from the data module's state implements it:
///
/// ```ignore
/// impl FromDataModule<TextData> for TokenBatcher {
///     fn from_data_module(data: &TextData) -> Self {
///         TokenBatcher::new(data.vocabulary())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Default`, so the data module `{D}` cannot make it",
    label = "the batcher of `{D}`",
    note = "derive `Default` for the batcher, or implement `ember::FromDataModule<{D}>` for it"
)]
pub trait FromDataModule<D: ?Sized> {
    /// The batcher for `data`.
    fn from_data_module(data: &D) -> Self;
}

impl<D: ?Sized, T: Default> FromDataModule<D> for T {
    fn from_data_module(_data: &D) -> Self {
        T::default()
    }
}

/// A data module made of loaders and a batcher, for a program that needs no `DataModule` of
/// its own: `trainer.fit(model, &mut DataLoaders::new(batcher).train(train).val(val))`.
pub struct DataLoaders<I, Bt> {
    batcher: Given<Bt>,
    train: Option<Loader<I>>,
    val: Vec<Loader<I>>,
    test: Vec<Loader<I>>,
    predict: Vec<Loader<I>>,
}

impl<I, Bt> DataLoaders<I, Bt> {
    /// No loaders yet; `batcher` makes every loader's batches.
    pub fn new(batcher: Bt) -> Self {
        Self {
            batcher: Given(Arc::new(batcher)),
            train: None,
            val: Vec::new(),
            test: Vec::new(),
            predict: Vec::new(),
        }
    }

    /// The training loader.
    pub fn train(mut self, loader: Loader<I>) -> Self {
        self.train = Some(loader);
        self
    }

    /// A validation loader; called again, another one (the next `dataloader_idx`).
    pub fn val(mut self, loader: Loader<I>) -> Self {
        self.val.push(loader);
        self
    }

    /// A test loader; called again, another one.
    pub fn test(mut self, loader: Loader<I>) -> Self {
        self.test.push(loader);
        self
    }

    /// A predict loader; called again, another one.
    pub fn predict(mut self, loader: Loader<I>) -> Self {
        self.predict.push(loader);
        self
    }
}

impl<I: Send + Sync + 'static, Bt> DataModule for DataLoaders<I, Bt> {
    type Item = I;
    type Batcher = Given<Bt>;

    fn train_loader(&self) -> Option<Loader<I>> {
        self.train.clone()
    }

    fn val_loader(&self) -> Option<Loader<I>> {
        self.val.first().cloned()
    }

    fn test_loader(&self) -> Option<Loader<I>> {
        self.test.first().cloned()
    }

    fn predict_loader(&self) -> Option<Loader<I>> {
        self.predict.first().cloned()
    }

    fn val_loaders(&self) -> Vec<Loader<I>> {
        self.val.clone()
    }

    fn test_loaders(&self) -> Vec<Loader<I>> {
        self.test.clone()
    }

    fn predict_loaders(&self) -> Vec<Loader<I>> {
        self.predict.clone()
    }
}

/// The batcher a [`DataLoaders`] was given, shared with the loops.
pub struct Given<Bt>(Arc<Bt>);

impl<I, Bt> FromDataModule<DataLoaders<I, Bt>> for Given<Bt> {
    fn from_data_module(data: &DataLoaders<I, Bt>) -> Self {
        Given(Arc::clone(&data.batcher.0))
    }
}

impl<B: Backend, I, O, Bt: Batcher<B, I, O>> Batcher<B, I, O> for Given<Bt> {
    fn batch(&self, items: Vec<I>, device: &B::Device) -> O {
        self.0.batch(items, device)
    }
}

/// A permutation of `0..len` that depends only on `seed` and `epoch`: the order a shuffled
/// loader visits its items in. A hand-written loop can use it to see the same batches.
pub fn epoch_permutation(len: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.shuffle(&mut StdRng::seed_from_u64(
        seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::data::dataset::InMemDataset;

    fn loader(n: usize, batch: usize) -> Loader<usize> {
        Loader::new(InMemDataset::new((0..n).collect()), batch)
    }

    /// A batcher that makes, as its batch, what `batching` said while it ran.
    struct Probe;

    impl Batcher<burn_flex::Flex, usize, Option<usize>> for Probe {
        fn batch(&self, _: Vec<usize>, _: &burn_flex::FlexDevice) -> Option<usize> {
            batching()
        }
    }

    #[test]
    fn a_batcher_knows_the_size_of_the_batch_it_makes_and_nothing_else_does() {
        let l = loader(10, 4);
        let device = Default::default();
        assert_eq!(l.batch(&Probe, &[0, 1, 2], &device).unwrap(), Some(3));
        assert_eq!(batching(), None);
        let caught = std::panic::catch_unwind(|| making_batch(5, || panic!("in the batcher")));
        assert!(caught.is_err());
        assert_eq!(batching(), None, "a panicking batcher leaves nothing set");
    }

    #[test]
    fn batches_cover_the_epoch_once() {
        let l = loader(10, 3).shuffled();
        let batches = l.batch_indices(7, 0);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [3, 3, 3, 1]
        );
        let mut all: Vec<usize> = batches.concat();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(l.batch_indices(7, 0), batches);
        assert_ne!(l.batch_indices(7, 1), batches);
        assert_eq!(l.clone().drop_last().batch_indices(7, 0).len(), 3);
        assert_eq!(loader(10, 3).batch_indices(7, 5)[0], vec![0, 1, 2]);
    }

    #[test]
    fn a_loader_of_batch_size_0_is_refused_by_name() {
        assert!(loader(10, 1).checked("train").is_ok());
        let err = match loader(10, 0).checked("val") {
            Ok(_) => panic!("a loader of batch_size 0 was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("val loader") && err.contains("batch_size 0"),
            "{err}"
        );
    }

    #[test]
    fn shards_split_the_epoch_evenly_and_pad_with_its_first_items() {
        let whole = loader(10, 2).shuffled();
        let order = epoch_permutation(10, 3, 1);
        let shards: Vec<Vec<usize>> = (0..4)
            .map(|rank| {
                whole
                    .clone()
                    .sharded(Shard { rank, world: 4 })
                    .batch_indices(3, 1)
                    .concat()
            })
            .collect();
        assert!(shards.iter().all(|s| s.len() == 3));
        assert_eq!(shards[0], vec![order[0], order[4], order[8]]);
        assert_eq!(shards[1], vec![order[1], order[5], order[9]]);
        assert_eq!(shards[2], vec![order[2], order[6], order[0]]);
        assert_eq!(shards[3], vec![order[3], order[7], order[1]]);
        let sharded = whole.sharded(Shard { rank: 1, world: 4 });
        assert_eq!(sharded.num_batches(), 2);
        assert_eq!(sharded.clone().drop_last().num_batches(), 1);
    }
}
