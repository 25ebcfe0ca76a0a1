//! Data modules and loaders on burn's `Dataset` and `Batcher` types.
//!
//! A loader here is a recipe (a data source, batch size, shuffle, drop_last, workers); the
//! Trainer turns it into batches in a seeded order that depends only on the seed and the epoch,
//! and each item is made knowing the seed, the epoch and its index, so a run is reproducible
//! whatever the number of workers, and resumes exactly.

mod array_file;
mod loader;
mod shards;
#[cfg(test)]
mod shards_tests;
mod source;
mod stream;
#[cfg(test)]
mod tests;
mod workers;

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

pub use array_file::ArrayFile;
pub use loader::Loader;
pub use shards::{ShardFormat, Shards, TokenWindows};
pub(crate) use source::mix64;
pub use source::{DataSource, ItemKey};
pub use workers::Batches;
pub(crate) use workers::panic_message;

use crate::stage::Stage;

/// What a Trainer's loops tell around each batch their batcher makes: the device and the
/// batch's item count before, the device and `None` after. An accelerator whose device spans
/// several (xla) splits the batch's tensors — those whose first dimension is that count — by
/// rows over them ([`Accelerator::batch_scope`](crate::accelerator::Accelerator::batch_scope));
/// others do nothing.
pub type BatchScope<D> = fn(&D, Option<usize>);

/// The data side of a run (Lightning's LightningDataModule): where each loop's items come
/// from and how they become batches.
pub trait DataModule {
    /// One item of the datasets.
    type Item: Send + Sync + 'static;
    /// Turns items into batches on any backend the model needs. A `Default` batcher needs
    /// nothing more; one that needs the data module's state (a vocabulary, statistics)
    /// implements [`FromDataModule`] for this data module.
    type Batcher: FromDataModule<Self>;

    /// Prepares what `stage` needs (load files, split ...). Called once per Trainer entry point,
    /// before any loader is asked for.
    fn setup(&mut self, stage: Stage) -> anyhow::Result<()> {
        let _ = stage;
        Ok(())
    }

    /// Tells `fit`'s epoch before it asks for the train and val loaders (Lightning's
    /// `trainer.current_epoch` read in `train_dataloader`): at the start, and again every
    /// `reload_dataloaders_every_n_epochs` epochs when that option is set. A data module whose
    /// loaders change with the epoch (a curriculum) keeps it and reads it in
    /// [`train_loader`](Self::train_loader). A resumed fit sets the epoch an uninterrupted one
    /// made its loaders in (the latest reload at or before the resumed epoch), so loaders that
    /// depend only on it resume exactly.
    fn set_epoch(&mut self, epoch: u64) {
        let _ = epoch;
    }

    /// The training loader. A data module may build it here from its settings (open a folder,
    /// map a file): an error ends the entry point with that error as it is.
    fn train_loader(&self) -> anyhow::Result<Option<Loader<Self::Item>>>;

    /// The validation loader.
    fn val_loader(&self) -> anyhow::Result<Option<Loader<Self::Item>>> {
        Ok(None)
    }

    /// The test loader.
    fn test_loader(&self) -> anyhow::Result<Option<Loader<Self::Item>>> {
        Ok(None)
    }

    /// The predict loader.
    fn predict_loader(&self) -> anyhow::Result<Option<Loader<Self::Item>>> {
        Ok(None)
    }

    /// Every validation loader, in `dataloader_idx` order; by default the one
    /// [`val_loader`](Self::val_loader) gives. A data module with several overrides this one:
    /// each is run in turn, and with more than one the metrics a step logs are named
    /// `NAME/dataloader_idx_N` (see `LogOptions::add_dataloader_idx`).
    fn val_loaders(&self) -> anyhow::Result<Vec<Loader<Self::Item>>> {
        Ok(self.val_loader()?.into_iter().collect())
    }

    /// Every test loader, as [`val_loaders`](Self::val_loaders).
    fn test_loaders(&self) -> anyhow::Result<Vec<Loader<Self::Item>>> {
        Ok(self.test_loader()?.into_iter().collect())
    }

    /// Every predict loader, as [`val_loaders`](Self::val_loaders); `Trainer::predict_each`
    /// returns one list of predictions per loader.
    fn predict_loaders(&self) -> anyhow::Result<Vec<Loader<Self::Item>>> {
        Ok(self.predict_loader()?.into_iter().collect())
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
    batcher: SharedBatcher<Bt>,
    train: Option<Loader<I>>,
    val: Vec<Loader<I>>,
    test: Vec<Loader<I>>,
    predict: Vec<Loader<I>>,
}

impl<I, Bt> DataLoaders<I, Bt> {
    /// No loaders yet; `batcher` makes every loader's batches.
    pub fn new(batcher: Bt) -> Self {
        Self {
            batcher: SharedBatcher(Arc::new(batcher)),
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
    type Batcher = SharedBatcher<Bt>;

    fn train_loader(&self) -> anyhow::Result<Option<Loader<I>>> {
        Ok(self.train.clone())
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<I>>> {
        Ok(self.val.first().cloned())
    }

    fn test_loader(&self) -> anyhow::Result<Option<Loader<I>>> {
        Ok(self.test.first().cloned())
    }

    fn predict_loader(&self) -> anyhow::Result<Option<Loader<I>>> {
        Ok(self.predict.first().cloned())
    }

    fn val_loaders(&self) -> anyhow::Result<Vec<Loader<I>>> {
        Ok(self.val.clone())
    }

    fn test_loaders(&self) -> anyhow::Result<Vec<Loader<I>>> {
        Ok(self.test.clone())
    }

    fn predict_loaders(&self) -> anyhow::Result<Vec<Loader<I>>> {
        Ok(self.predict.clone())
    }
}

/// The batcher a [`DataLoaders`] was given, shared with the loops.
pub struct SharedBatcher<Bt>(Arc<Bt>);

impl<I, Bt> FromDataModule<DataLoaders<I, Bt>> for SharedBatcher<Bt> {
    fn from_data_module(data: &DataLoaders<I, Bt>) -> Self {
        SharedBatcher(Arc::clone(&data.batcher.0))
    }
}

impl<B: Backend, I, O, Bt: Batcher<B, I, O>> Batcher<B, I, O> for SharedBatcher<Bt> {
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
