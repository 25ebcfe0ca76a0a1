//! `reload_dataloaders_every_n_epochs`, as Lightning's behaves
//! (tests/tests_pytorch/trainer/test_dataloaders.py: `test_dataloaders_load_every_n_epochs`,
//! `test_dataloaders_load_every_epoch_no_sanity_check`): with N, fit asks for its train and val
//! loaders at epochs 0, N, 2N ...; with 0, once. The data module learns the epoch first
//! (`DataModule::set_epoch`), so its loaders may change with it; a fit resumed part-way
//! through starts on the loaders an uninterrupted one used then, and ends bitwise as it did.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use burn::data::dataset::InMemDataset;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::{DataModule, FitOutcome, Loader, Trainer, TrainerOptions};
use ember_acceptance::regression::{
    Item, ItemBatcher, Regression, items, quiet_options, serial, weight_bits,
};

type B = Autodiff<Flex>;

/// Training items that grow with the epoch it was told (8 + 4 × epoch, in batches of 4), and
/// a fixed val loader; it records what it was asked.
#[derive(Default)]
struct Growing {
    epoch: u64,
    told: Rc<RefCell<Vec<u64>>>,
    train_calls: Rc<Cell<usize>>,
    val_calls: Rc<Cell<usize>>,
}

impl DataModule for Growing {
    type Item = Item;
    type Batcher = ItemBatcher;

    fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.told.borrow_mut().push(epoch);
    }

    fn train_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        self.train_calls.set(self.train_calls.get() + 1);
        let n = 8 + 4 * self.epoch as usize;
        Ok(Some(
            Loader::new(InMemDataset::new(items(n, 0)), 4).shuffled(),
        ))
    }

    fn val_loader(&self) -> anyhow::Result<Option<Loader<Item>>> {
        self.val_calls.set(self.val_calls.get() + 1);
        Ok(Some(Loader::new(InMemDataset::new(items(4, 10_000)), 4)))
    }
}

fn options(root: &Path, every: u64) -> TrainerOptions {
    TrainerOptions {
        reload_dataloaders_every_n_epochs: every,
        ..quiet_options(root, 5)
    }
}

fn fit(options: TrainerOptions, data: &mut Growing) -> FitOutcome<Regression<B>> {
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options).unwrap();
    let model = Regression::new(trainer.device());
    trainer.fit(model, data).unwrap()
}

#[test]
fn loaders_are_made_again_every_n_epochs_for_the_epoch_they_are_told() {
    let _serial = serial();
    // Optimizer steps: each epoch's batches of the loader it trains on.
    for (every, told, steps) in [
        (0, vec![0], 10),
        (1, vec![0, 1, 2, 3, 4], 2 + 3 + 4 + 5 + 6),
        (2, vec![0, 2, 4], 2 + 2 + 4 + 4 + 6),
        (3, vec![0, 3], 2 + 2 + 2 + 5 + 5),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut data = Growing::default();
        let out = fit(options(dir.path(), every), &mut data);
        assert_eq!(*data.told.borrow(), told, "every {every}");
        assert_eq!(data.train_calls.get(), told.len(), "every {every}");
        assert_eq!(data.val_calls.get(), told.len(), "every {every}");
        assert_eq!(out.global_step, steps, "every {every}");
        let last = *told.last().unwrap() as f64;
        assert_eq!(out.metrics["max_index"], 8.0 + 4.0 * last - 1.0);
    }
}

#[test]
fn a_fit_resumed_between_reloads_trains_on_the_loaders_it_had_and_ends_bitwise() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = fit(options(dir.path(), 2), &mut Growing::default());
    assert_eq!(whole.global_step, 18);

    // Stopped in epoch 3 (2 + 2 + 4 steps before it, 3 of its 4 batches done), then resumed.
    let cut = TrainerOptions {
        max_steps: Some(11),
        ..options(dir.path(), 2)
    };
    let stopped = fit(cut, &mut Growing::default());
    assert_eq!(stopped.global_step, 11);
    let checkpoint: PathBuf = stopped.best_model_path.expect("a checkpoint at the stop");
    let resumed = TrainerOptions {
        ckpt_path: Some(checkpoint),
        ..options(dir.path(), 2)
    };
    let mut data = Growing::default();
    let out = fit(resumed, &mut data);
    assert_eq!(
        *data.told.borrow(),
        [2, 4],
        "epoch 3 trains on the loaders made at epoch 2"
    );
    assert_eq!(out.global_step, 18);
    assert_eq!(weight_bits(&out.model), weight_bits(&whole.model));
}
