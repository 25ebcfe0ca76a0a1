//! [`Loader`]: how one data source becomes batches.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use burn::data::dataset::{Dataset, InMemDataset};

use super::epoch_permutation;
use super::shards::{ShardFormat, Shards};
use super::source::{DataSource, FromDataset, ItemKey, Mapped};
use super::stream::{DEFAULT_BUFFER, StreamPlan};
use super::workers::{Batches, Pool};
use crate::plugins::shard::Shard;

/// How to batch one data source.
pub struct Loader<I> {
    /// The items.
    pub dataset: Arc<dyn DataSource<I>>,
    /// Items per batch.
    pub batch_size: usize,
    /// Shuffle every epoch (seeded by the Trainer's seed and the epoch).
    pub shuffle: bool,
    /// Drop a last batch smaller than `batch_size`.
    pub drop_last: bool,
    /// The share of each epoch this process batches (all of it unless the run is distributed).
    pub shard: Shard,
    /// Threads making items ahead of the step (0: the training thread makes each batch when
    /// it is needed).
    pub num_workers: usize,
    /// Batches each worker makes ahead.
    pub prefetch_factor: usize,
    /// Leave out of its batch an item that cannot be made (a file that does not decode),
    /// instead of stopping the run; each pass warns of how many it left out.
    pub skip_failed_items: bool,
    /// The shards' layout, for a loader over [`Shards`] (which reads them in a streaming order).
    stream: Option<StreamPlan>,
    /// A shuffle buffer asked of a loader that reads no shards, refused when it is checked.
    stray_buffer: Option<usize>,
    /// The loader's name in errors (train, val, ...).
    name: String,
    /// The worker threads, started by the first pass that needs them; a clone starts its own.
    pool: Mutex<Option<Pool<I>>>,
}

impl<I> Clone for Loader<I> {
    fn clone(&self) -> Self {
        self.with_source(Arc::clone(&self.dataset))
    }
}

impl<I> Loader<I> {
    /// A loader over `dataset` (any burn `Dataset`: an `InMemDataset`, an `Arc` of one ...) in
    /// its own order.
    pub fn new(dataset: impl Dataset<I> + 'static, batch_size: usize) -> Self {
        Self::from_source(FromDataset(dataset), batch_size)
    }

    /// A loader over a [`DataSource`]: items that are made knowing their [`ItemKey`] and can
    /// fail with an error of their own.
    pub fn from_source(source: impl DataSource<I> + 'static, batch_size: usize) -> Self {
        Self {
            dataset: Arc::new(source),
            batch_size,
            shuffle: false,
            drop_last: false,
            shard: Shard::WHOLE,
            num_workers: 0,
            prefetch_factor: 2,
            skip_failed_items: false,
            stream: None,
            stray_buffer: None,
            name: "data".into(),
            pool: Mutex::new(None),
        }
    }

    /// A loader over a corpus of shard files, read as a stream: each epoch takes the shards
    /// one after the other (in a seeded order when [`shuffled`](Self::shuffled), through a
    /// shuffle buffer of [`shuffle_buffer`](Self::shuffle_buffer) records), and under ddp each
    /// rank reads an equal run of them. Only the records a batch needs are read, when it is
    /// made, so the corpus can be far larger than memory; a resumed pass finds its place from
    /// the batch it stopped at.
    pub fn from_shards<F: ShardFormat<Record = I>>(shards: Shards<F>, batch_size: usize) -> Self {
        let stream = StreamPlan {
            starts: shards.starts(),
            buffer: DEFAULT_BUFFER,
        };
        Self {
            stream: Some(stream),
            ..Self::from_source(shards, batch_size)
        }
    }

    /// Holds `records` records in the shuffle buffer of a shuffled loader over shards
    /// (default 1024): each record read goes into the buffer, and a batch takes records from
    /// it at random. Memory grows with it; so does how far a record can move. A loader that
    /// reads no shards has no buffer, and the Trainer refuses one asked of it.
    pub fn shuffle_buffer(mut self, records: usize) -> Self {
        match self.stream.as_mut() {
            Some(stream) => stream.buffer = records,
            None => self.stray_buffer = Some(records),
        }
        self
    }

    /// This loader with every item passed through `map` as it is made (on a worker, when
    /// there are workers): decoding, augmenting. `map` gets the item's [`ItemKey`], whose
    /// [`rng`](ItemKey::rng) a random augmentation draws from.
    pub fn map<O>(
        self,
        map: impl Fn(I, &ItemKey) -> anyhow::Result<O> + Send + Sync + 'static,
    ) -> Loader<O>
    where
        I: 'static,
    {
        self.with_source(Arc::new(Mapped {
            source: Arc::clone(&self.dataset),
            map,
        }))
    }

    /// A loader of `dataset` with this one's settings (and workers of its own).
    fn with_source<O>(&self, dataset: Arc<dyn DataSource<O>>) -> Loader<O> {
        Loader {
            dataset,
            batch_size: self.batch_size,
            shuffle: self.shuffle,
            drop_last: self.drop_last,
            shard: self.shard,
            num_workers: self.num_workers,
            prefetch_factor: self.prefetch_factor,
            skip_failed_items: self.skip_failed_items,
            stream: self.stream.clone(),
            stray_buffer: self.stray_buffer,
            name: self.name.clone(),
            pool: Mutex::new(None),
        }
    }

    /// Makes items on `workers` threads ahead of the step (Lightning's `num_workers`); the
    /// batches are the same for any number.
    pub fn num_workers(mut self, workers: usize) -> Self {
        self.num_workers = workers;
        self
    }

    /// Leaves out of its batch an item that cannot be made, instead of stopping the run: the
    /// batch is smaller, and each pass warns of how many items it left out and why the first
    /// was (a batch none of whose items can be made still stops the run).
    pub fn skip_failed_items(mut self) -> Self {
        self.skip_failed_items = true;
        self
    }

    /// Lets each worker make `batches` batches ahead (at least 1; 2 by default).
    pub fn prefetch_factor(mut self, batches: usize) -> Self {
        self.prefetch_factor = batches;
        self
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

    fn checked_as(mut self, name: &str, method: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            self.batch_size > 0,
            "the {name} loader (DataModule::{method}) has batch_size 0; a batch needs at least 1 item"
        );
        anyhow::ensure!(
            self.num_workers == 0 || self.prefetch_factor > 0,
            "the {name} loader (DataModule::{method}) has prefetch_factor 0 with {} workers; \
             each worker needs at least 1 batch to make",
            self.num_workers
        );
        if let Some(records) = self.stray_buffer {
            anyhow::bail!(
                "the {name} loader (DataModule::{method}) was given a shuffle buffer of {records} \
                 records, but it reads no shards: only a loader made by Loader::from_shards has one \
                 (shuffled() shuffles any other whole)"
            );
        }
        self.name = name.to_string();
        Ok(self)
    }

    /// `loaders` (of loop `which`) checked, sharded as `shard` and sized for the `devices` a
    /// process drives (`batch_size` items per device).
    pub(crate) fn for_strategy(
        loaders: Vec<Self>,
        which: &str,
        (shard, devices): (Shard, usize),
    ) -> anyhow::Result<Vec<Self>> {
        let checked = Self::checked_all(loaders, which, shard)?;
        Ok(checked
            .into_iter()
            .map(|l| l.for_devices(devices))
            .collect())
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
        let n = match &self.stream {
            Some(stream) => stream.items(self.shard),
            None => self.shard.items(self.dataset.len()),
        };
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// The item indices of each batch of `epoch` (of this loader's shard), in order.
    pub fn batch_indices(&self, seed: u64, epoch: u64) -> Vec<Vec<usize>> {
        self.batch_order(seed, epoch).collect()
    }

    /// The item indices of each batch of `epoch`, made as they are asked for.
    pub(crate) fn batch_order(
        &self,
        seed: u64,
        epoch: u64,
    ) -> Box<dyn Iterator<Item = Vec<usize>> + Send> {
        let mut items: Box<dyn Iterator<Item = usize> + Send> = match &self.stream {
            Some(stream) => Box::new(stream.order(self.shuffle, seed, epoch, self.shard)),
            None => {
                let len = self.dataset.len();
                let order = match self.shuffle {
                    true => epoch_permutation(len, seed, epoch),
                    false => (0..len).collect(),
                };
                Box::new(self.shard.take(&order).into_iter())
            }
        };
        let size = self.batch_size;
        let batches = std::iter::from_fn(move || {
            let batch: Vec<usize> = items.by_ref().take(size).collect();
            (!batch.is_empty()).then_some(batch)
        });
        Box::new(batches.take(self.num_batches()))
    }

    /// The batches `range` of `epoch` (clamped to the epoch), in order: their items made by
    /// the workers, ahead, or on this thread when there are none. The workers start with the
    /// first pass that needs them and serve every later pass of this loader.
    pub fn pass(&self, seed: u64, epoch: u64, range: Range<usize>) -> anyhow::Result<Batches<'_, I>>
    where
        I: Send + 'static,
    {
        let mut batches = self.batch_order(seed, epoch);
        let end = range.end.min(self.num_batches());
        let first = range.start.min(end);
        for _ in 0..first {
            batches.next();
        }
        // A second pass while one is running (a loader validating itself) makes its own items.
        let mut pool = match self.num_workers {
            0 => None,
            _ => self.pool.try_lock().ok(),
        };
        if let Some(slot) = pool.as_mut()
            && slot.is_none()
        {
            **slot = Some(Pool::start(&self.dataset, self.num_workers, &self.name)?);
        }
        let ahead = (self.num_workers * self.prefetch_factor).max(1);
        let pass = Batches {
            source: &*self.dataset,
            name: &self.name,
            pool,
            ahead,
            seed,
            epoch,
            batches,
            count: end - first,
            first,
            pass: 0,
            submitted: 0,
            taken: 0,
            skip: self.skip_failed_items,
            skipped: Vec::new(),
            last_len: 0,
        };
        Ok(pass.started())
    }
}
