//! Prediction writers, as Lightning's `BasePredictionWriter` behaves
//! (tests/tests_pytorch/callbacks/test_prediction_writer.py: `test_prediction_writer_invalid_write_interval`,
//! `test_prediction_writer_hook_call_intervals`, `test_prediction_writer_batch_indices`): a
//! `batch` writer is called once per predicted batch, an `epoch` writer once with every batch
//! (also when `return_predictions` is off), `batch_and_epoch` both; each batch comes with the
//! dataset indices of its items and its loader; `return_predictions=false` returns nothing.

use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{
    CallbackContext, JsonLinesConfig, JsonLinesWriter, PredictedBatch, PredictionWriter,
    WriteInterval, WritePredictions,
};
use ember::options::Limit;
use ember::{
    DataLoaders, Hparams, LightningModule, Optimizers, Prediction, StepLog, Trainer,
    TrainerOptions, TrainingModule, optim,
};
use ember_acceptance::regression::{
    Batch, Item, ItemBatcher, Regression, items, quiet_options, serial,
};

type B = Autodiff<Flex>;

/// The regression model predicting, for each item, its index in the data set.
#[derive(Module, Debug)]
struct Indexed<B: Backend> {
    inner: Regression<B>,
}

impl<B: Backend> LightningModule<B> for Indexed<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        self.inner.training_step(batch, log)
    }

    fn predict_step(&self, batch: Batch<B>) -> Prediction {
        Prediction::of(&batch.indices)
    }
}

impl<B: AutodiffBackend> TrainingModule<B> for Indexed<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(&self, _: &Hparams) -> anyhow::Result<Optimizers<Self::Optimizer>> {
        Ok(Optimizers::sgd(0.05))
    }
}

fn model() -> Indexed<Flex> {
    Indexed {
        inner: Regression::<B>::new(&FlexDevice),
    }
    .valid()
}

/// Predict loaders of 7 items (batches of 2: 4 batches, the last of 1) and of 4 items.
fn two_loaders() -> DataLoaders<Item, ItemBatcher> {
    let loader = |n| ember::Loader::new(InMemDataset::new(items(n, 0)), 2);
    DataLoaders::new(ItemBatcher)
        .predict(loader(7))
        .predict(loader(4))
}

/// What a writer was called with, shared with the test.
#[derive(Default)]
struct Calls {
    batches: Vec<PredictedBatch>,
    epochs: Vec<Vec<PredictedBatch>>,
}

/// A writer that records its calls.
struct Recorder(Rc<RefCell<Calls>>);

impl WritePredictions for Recorder {
    fn write_on_batch_end(
        &mut self,
        _: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        self.0.borrow_mut().batches.push(batch.clone());
        Ok(())
    }

    fn write_on_epoch_end(
        &mut self,
        _: &mut CallbackContext<'_>,
        predictions: &[PredictedBatch],
    ) -> anyhow::Result<()> {
        self.0.borrow_mut().epochs.push(predictions.to_vec());
        Ok(())
    }
}

fn trainer(root: &Path, return_predictions: bool) -> Trainer<B> {
    let options = TrainerOptions {
        return_predictions,
        ..quiet_options(root, 1)
    };
    Trainer::<B>::on_device(FlexDevice, options).unwrap()
}

/// Predicts `two_loaders` with a recording writer at `interval`; returns what `predict_each`
/// returned and what the writer saw.
fn predict_with(interval: WriteInterval, returned: bool) -> (Vec<Vec<Vec<usize>>>, Calls) {
    let dir = tempfile::tempdir().unwrap();
    let calls = Rc::new(RefCell::new(Calls::default()));
    let writer = PredictionWriter::new(Recorder(Rc::clone(&calls)), interval);
    let mut trainer = trainer(dir.path(), returned).with_callback(writer);
    let each = trainer.predict_each(model(), &mut two_loaders()).unwrap();
    drop(trainer);
    let calls = Rc::try_unwrap(calls).ok().unwrap().into_inner();
    (each, calls)
}

/// The batches `two_loaders` makes, as (loader, batch index, dataset indices).
fn expected() -> Vec<(usize, usize, Vec<usize>)> {
    let first = [vec![0, 1], vec![2, 3], vec![4, 5], vec![6]];
    let second = [vec![0, 1], vec![2, 3]];
    let one = first.into_iter().enumerate().map(|(i, b)| (0, i, b));
    one.chain(second.into_iter().enumerate().map(|(i, b)| (1, i, b)))
        .collect()
}

fn described(batches: &[PredictedBatch]) -> Vec<(usize, usize, Vec<usize>)> {
    (batches.iter())
        .map(|b| {
            let predicted: Vec<usize> = serde_json::from_value(b.prediction.clone()).unwrap();
            assert_eq!(
                predicted, b.batch_indices,
                "the model predicts its items' indices"
            );
            (b.dataloader_idx, b.batch_idx, b.batch_indices.clone())
        })
        .collect()
}

#[test]
fn a_batch_writer_sees_every_batch_with_its_indices_and_loader_once() {
    let _serial = serial();
    let (each, calls) = predict_with(WriteInterval::Batch, true);
    assert_eq!(described(&calls.batches), expected());
    assert!(calls.epochs.is_empty(), "a batch writer writes no epoch");
    assert_eq!(each.iter().map(Vec::len).collect::<Vec<_>>(), [4, 2]);
    let returned: Vec<(usize, usize, Vec<usize>)> = (each.into_iter().enumerate())
        .flat_map(|(l, batches)| batches.into_iter().enumerate().map(move |(i, b)| (l, i, b)))
        .collect();
    assert_eq!(
        returned,
        expected(),
        "what it wrote is what predict returns"
    );
}

#[test]
fn an_epoch_writer_gets_every_batch_once_even_when_predictions_are_not_returned() {
    let _serial = serial();
    let (each, calls) = predict_with(WriteInterval::Epoch, false);
    assert!(calls.batches.is_empty(), "an epoch writer writes no batch");
    assert_eq!(calls.epochs.len(), 1, "one epoch for both loaders");
    assert_eq!(described(&calls.epochs[0]), expected());
    assert_eq!(each, [Vec::<Vec<usize>>::new(), Vec::new()]);
}

#[test]
fn batch_and_epoch_writes_both_and_return_predictions_off_returns_nothing() {
    let _serial = serial();
    let (each, calls) = predict_with(WriteInterval::BatchAndEpoch, false);
    assert_eq!(described(&calls.batches), expected());
    assert_eq!(calls.epochs.len(), 1);
    assert_eq!(calls.epochs[0], calls.batches);
    assert_eq!(each, [Vec::<Vec<usize>>::new(), Vec::new()]);
}

#[test]
fn limit_predict_batches_limits_what_is_written() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let calls = Rc::new(RefCell::new(Calls::default()));
    let options = TrainerOptions {
        limit_predict_batches: Limit::Batches(1),
        return_predictions: false,
        ..quiet_options(dir.path(), 1)
    };
    let writer = PredictionWriter::new(Recorder(Rc::clone(&calls)), WriteInterval::Batch);
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .unwrap()
        .with_callback(writer);
    trainer
        .predict_each::<_, _, Vec<usize>>(model(), &mut two_loaders())
        .unwrap();
    let seen: Vec<(usize, usize)> = (calls.borrow().batches.iter())
        .map(|b| (b.dataloader_idx, b.batch_idx))
        .collect();
    assert_eq!(seen, [(0, 0), (1, 0)]);
}

#[test]
fn the_json_lines_writer_writes_a_line_per_batch_and_starts_afresh_each_predict() {
    let _serial = serial();
    for interval in [WriteInterval::Batch, WriteInterval::Epoch] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("predictions");
        let config = JsonLinesConfig {
            output_dir: out.clone(),
            write_interval: interval,
        };
        let writer = JsonLinesWriter::callback(config).unwrap();
        let mut trainer = trainer(dir.path(), false).with_callback(writer);
        for _ in 0..2 {
            trainer
                .predict_each::<_, _, Vec<usize>>(model(), &mut two_loaders())
                .unwrap();
            let text = std::fs::read_to_string(out.join("predictions-rank0.jsonl")).unwrap();
            let lines: Vec<PredictedBatch> = (text.lines())
                .map(|line| serde_json::from_str(line).unwrap())
                .collect();
            assert_eq!(described(&lines), expected(), "{interval:?}");
        }
    }
}

#[test]
fn the_json_lines_writer_refuses_batch_and_epoch_naming_the_setting() {
    let config = JsonLinesConfig {
        output_dir: "p".into(),
        write_interval: WriteInterval::BatchAndEpoch,
    };
    let err = JsonLinesWriter::callback(config).err().unwrap().to_string();
    assert!(err.contains("write_interval"), "{err}");
    assert!(err.contains("batch_and_epoch"), "{err}");
}

/// docs/trainer.md's example writer, as the page shows it.
/// Each item's predicted class as a line `item index,class` in `classes-rank<N>.csv` under its
/// folder, a file per rank.
struct Csv(PathBuf, Option<File>);

impl WritePredictions for Csv {
    fn write_on_batch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        if self.1.is_none() {
            let name = format!("classes-rank{}.csv", ctx.state.global_rank);
            self.1 = Some(File::create(self.0.join(name))?);
        }
        let file = self.1.as_mut().expect("created above");
        let classes: Vec<u32> = serde_json::from_value(batch.prediction.clone())?;
        for (index, class) in batch.batch_indices.iter().zip(classes) {
            writeln!(file, "{index},{class}")?;
        }
        Ok(())
    }

    fn finish(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.1 = None; // the next predict starts its files afresh
        Ok(())
    }
}

#[test]
fn the_docs_csv_writer_writes_each_item_once_per_predict() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().to_owned();
    let writer = PredictionWriter::new(Csv(folder, None), WriteInterval::Batch);
    let mut trainer = trainer(dir.path(), false).with_callback(writer);
    for _ in 0..2 {
        trainer
            .predict_each::<_, _, Vec<usize>>(model(), &mut two_loaders())
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join("classes-rank0.csv")).unwrap();
        let first: Vec<String> = (0..7).map(|i| format!("{i},{i}")).collect();
        let second: Vec<String> = (0..4).map(|i| format!("{i},{i}")).collect();
        assert_eq!(text.lines().collect::<Vec<_>>(), [first, second].concat());
    }
}
