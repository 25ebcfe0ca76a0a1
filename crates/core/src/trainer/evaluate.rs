//! The Trainer's evaluation entry points: `validate`, `test` and `predict`, over every loader
//! the data module gives for the stage.

use std::collections::BTreeMap;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::module::Module;
use burn::tensor::backend::AutodiffBackend;
use serde::de::DeserializeOwned;

use super::data::{DataModule, FromDataModule, Loader};
use super::loops::evaluation::EvaluationLoop;
use super::loops::prediction::{self, PredictionLoop};
use super::loops::schedule;
use super::module::LightningModule;
use super::{Inner, Trainer, weights};
use crate::plugins::shard::Shard;
use crate::stage::Stage;

impl<B: AutodiffBackend> Trainer<B> {
    /// One validation pass over `data`'s val loaders; returns the epoch metrics (with several
    /// loaders, named `NAME/dataloader_idx_N`).
    pub fn validate<M, D>(
        &mut self,
        model: M,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: LightningModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        self.evaluate(Stage::Validate, model, data)
    }

    /// One test pass over `data`'s test loaders; returns the epoch metrics, named as
    /// [`validate`](Self::validate) names them.
    pub fn test<M, D>(&mut self, model: M, data: &mut D) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: LightningModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        self.evaluate(Stage::Test, model, data)
    }

    /// Predictions for every batch of `data`'s predict loader, in order, each read as `T`
    /// (the type `predict_step` gave [`Prediction::of`](super::module::Prediction::of), or
    /// `serde_json::Value`). With several processes each predicts a contiguous share of the
    /// batches and rank 0 returns them all, in order (the other ranks return none). Each is
    /// handed to the callbacks as it is made (a
    /// [`PredictionWriter`](crate::callbacks::PredictionWriter) writes them); with the option
    /// `return_predictions` off none is kept for returning, and the list is empty. A data
    /// module with several predict loaders is predicted by [`predict_each`](Self::predict_each).
    pub fn predict<M, D, T>(&mut self, model: M, data: &mut D) -> anyhow::Result<Vec<T>>
    where
        M: LightningModule<Inner<B>>,
        T: DeserializeOwned,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        Ok(self
            .predict_loaders(model, data, true)?
            .pop()
            .unwrap_or_default())
    }

    /// Predictions for every batch of each of `data`'s predict loaders, one list per loader in
    /// `dataloader_idx` order (Lightning's list of lists), as [`predict`](Self::predict) makes
    /// them.
    pub fn predict_each<M, D, T>(&mut self, model: M, data: &mut D) -> anyhow::Result<Vec<Vec<T>>>
    where
        M: LightningModule<Inner<B>>,
        T: DeserializeOwned,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        self.predict_loaders(model, data, false)
    }

    /// [`predict_each`](Self::predict_each); with `one`, a data module with several predict
    /// loaders is refused once its `setup` made them, before anything is predicted.
    fn predict_loaders<M, D, T>(
        &mut self,
        model: M,
        data: &mut D,
        one: bool,
    ) -> anyhow::Result<Vec<Vec<T>>>
    where
        M: LightningModule<Inner<B>>,
        T: DeserializeOwned,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        weights::materialize(&model);
        let checked = (|| {
            data.setup(Stage::Predict)?;
            let loaders = Loader::checked_all(data.predict_loaders()?, "predict", Shard::WHOLE)?;
            anyhow::ensure!(
                !loaders.is_empty(),
                "predict needs data: DataModule::predict_loader returned None"
            );
            anyhow::ensure!(
                !one || loaders.len() == 1,
                "the data module has {} predict loaders: Trainer::predict_each returns one list per loader",
                loaders.len()
            );
            Ok((loaders, self.load_weights(model)?))
        })();
        let (loaders, model) = self.agree(checked)?;
        let mut run = self.start(Stage::Predict)?;
        let batcher = D::Batcher::from_data_module(data);
        let returned = self.options.return_predictions;
        let keep = returned || run.callbacks.iter().any(|c| c.keeps_predictions());
        let result = (|| {
            let mut kept = Vec::new();
            for (index, loader) in loaders.iter().enumerate() {
                let limit = self.options.limit_predict_batches;
                let batches = schedule::eval_batches(&self.options, limit, loader.num_batches());
                run.state.dataloader_idx = index;
                let pass = PredictionLoop { batches, keep };
                kept.extend(pass.run(self, &mut run, &model, (loader, &batcher))?);
            }
            run.hook(|c, x| c.on_predict_epoch_end(x, &kept))?;
            let mut each = vec![Vec::new(); loaders.len()];
            if !returned {
                return Ok(each);
            }
            for batch in kept {
                each[batch.dataloader_idx].push(batch.prediction);
            }
            (each.into_iter())
                .map(|values| prediction::gather(self, values))
                .collect()
        })();
        let loaders = self.finish(run, result)?;
        (loaders.into_iter().enumerate())
            .map(|(index, values)| {
                (values.into_iter().enumerate())
                    .map(|(i, value)| {
                        serde_json::from_value(value).with_context(|| {
                            format!(
                                "the prediction of batch {i} of predict loader {index} is not a {}",
                                std::any::type_name::<T>()
                            )
                        })
                    })
                    .collect()
            })
            .collect()
    }

    fn evaluate<M, D>(
        &mut self,
        stage: Stage,
        model: M,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        M: LightningModule<Inner<B>>,
        D: DataModule,
        D::Batcher: Batcher<Inner<B>, D::Item, M::Batch>,
    {
        weights::materialize(&model);
        let limit = match stage {
            Stage::Test => self.options.limit_test_batches,
            _ => self.options.limit_val_batches,
        };
        let checked = (|| {
            data.setup(stage)?;
            let (loaders, which) = match stage {
                Stage::Test => (data.test_loaders()?, "test"),
                _ => (data.val_loaders()?, "val"),
            };
            anyhow::ensure!(
                !loaders.is_empty(),
                "{} needs data: DataModule::{which}_loader returned None",
                stage.name()
            );
            Ok((
                self.strategy_loaders(loaders, which)?,
                self.load_weights(model)?,
            ))
        })();
        let (loaders, model) = self.agree(checked)?;
        let mut run = self.start(stage)?;
        let result = (|| {
            let batches: Vec<usize> = (loaders.iter())
                .map(|loader| schedule::eval_batches(&self.options, limit, loader.num_batches()))
                .collect();
            run.state.num_eval_batches = batches.first().copied().unwrap_or(0);
            run.hook(|c, x| match stage {
                Stage::Test => c.on_test_start(x),
                _ => c.on_validation_start(x),
            })?;
            let pass = EvaluationLoop { stage, batches };
            let metrics = pass.run(
                self,
                &mut run,
                &model,
                (&loaders, &D::Batcher::from_data_module(data)),
            )?;
            run.publish(&metrics, true)?;
            run.hook(|c, x| match stage {
                Stage::Test => c.on_test_end(x),
                _ => c.on_validation_end(x),
            })?;
            Ok(metrics)
        })();
        self.finish(run, result)
    }

    fn load_weights<M: Module<Inner<B>>>(&self, model: M) -> anyhow::Result<M> {
        let Some((path, checkpoint)) = self.resume_checkpoint()? else {
            return Ok(model);
        };
        checkpoint.load_model::<Inner<B>, M>(model, &path)
    }
}
