//! The loaders `fit` trains and validates on, made from the data module at the start and again
//! every `reload_dataloaders_every_n_epochs` epochs (Lightning's option of that name).

use anyhow::Context;

use super::schedule::FitSchedule;
use crate::error::FlagError;
use crate::options::TrainerOptions;
use crate::plugins::shard::Shard;
use crate::trainer::data::{DataModule, Loader};

/// A train loader and the val loaders.
pub(in crate::trainer) type TrainAndVal<I> = (Loader<I>, Vec<Loader<I>>);

/// What makes fit's loaders for an epoch (over the data module, see [`fit_loaders`]).
pub(in crate::trainer) type MakeLoaders<'d, I> =
    Box<dyn FnMut(u64) -> anyhow::Result<TrainAndVal<I>> + 'd>;

/// fit's loaders for `epoch`: the data module told the epoch, then its train and val loaders
/// checked, sharded (`shard` of each epoch) and sized for the `devices` this process drives.
pub(in crate::trainer) fn fit_loaders<D: DataModule>(
    data: &mut D,
    epoch: u64,
    (shard, devices): (Shard, usize),
) -> anyhow::Result<TrainAndVal<D::Item>> {
    data.set_epoch(epoch);
    let sizing = (shard, devices);
    let train = data
        .train_loader()?
        .context("fit needs training data: DataModule::train_loader returned None")?;
    let train = Loader::for_strategy(vec![train], "train", sizing)?.pop();
    let train = train.context("one train loader in, one out")?;
    Ok((
        train,
        Loader::for_strategy(data.val_loaders()?, "val", sizing)?,
    ))
}

/// The fit's schedule for loaders `(train, val)` under `options`.
pub(in crate::trainer) fn schedule<I>(
    options: &TrainerOptions,
    (train, val): (&Loader<I>, &[Loader<I>]),
) -> Result<FitSchedule, FlagError> {
    let val_batches: Vec<usize> = val.iter().map(Loader::num_batches).collect();
    FitSchedule::new(options, train.num_batches(), &val_batches)
}

/// The epoch whose loaders epoch `epoch` uses when they are made at epoch 0 and again every
/// `every` epochs (`every` 0: made once, at 0).
pub(in crate::trainer) fn made_for(every: u64, epoch: u64) -> u64 {
    match every {
        0 => 0,
        n => epoch - epoch % n,
    }
}

/// fit's loaders, and how to make them again.
pub(in crate::trainer) struct FitLoaders<'d, I> {
    pub(in crate::trainer) train: Loader<I>,
    pub(in crate::trainer) val: Vec<Loader<I>>,
    /// The epoch the data module was told when they were made.
    made_for: u64,
    every: u64,
    make: MakeLoaders<'d, I>,
}

impl<'d, I> FitLoaders<'d, I> {
    /// `(train, val)`, made for epoch `made_for`; `make` makes them again every `every` epochs.
    pub(in crate::trainer) fn new(
        (train, val): TrainAndVal<I>,
        made_for: u64,
        every: u64,
        make: MakeLoaders<'d, I>,
    ) -> Self {
        Self {
            train,
            val,
            made_for,
            every,
            make,
        }
    }

    /// Whether they are made again at all.
    pub(in crate::trainer) fn reloads(&self) -> bool {
        self.every > 0
    }

    /// Makes the loaders epoch `epoch` uses, when they are not those held; returns whether it
    /// made new ones.
    pub(in crate::trainer) fn reload(&mut self, epoch: u64) -> anyhow::Result<bool> {
        let due = made_for(self.every, epoch);
        if due == self.made_for {
            return Ok(false);
        }
        let (train, val) = (self.make)(due)
            .with_context(|| format!("making the loaders again for epoch {due}"))?;
        (self.train, self.val, self.made_for) = (train, val, due);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::made_for;

    #[test]
    fn loaders_are_those_of_the_latest_reload_epoch() {
        let every_2: Vec<u64> = (0..6).map(|e| made_for(2, e)).collect();
        assert_eq!(every_2, [0, 0, 2, 2, 4, 4]);
        assert_eq!(made_for(1, 5), 5);
        assert_eq!(made_for(0, 5), 0, "0: made once");
    }
}
