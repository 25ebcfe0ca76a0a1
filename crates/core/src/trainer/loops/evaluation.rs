//! The evaluation loop: one pass of validation or test batches with their batch hooks
//! (Lightning's `_EvaluationLoop`), run by `validate`, `test` and within `fit`.

use std::collections::BTreeMap;

use burn::data::dataloader::batcher::Batcher;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;

use crate::plugins::precision;
use crate::stage::Stage;
use crate::trainer::collector::MetricCollector;
use crate::trainer::data::Loader;
use crate::trainer::log::StepLog;
use crate::trainer::module::{LightningModule, MissingStep};
use crate::trainer::run::Run;
use crate::trainer::{Inner, Trainer};

/// A pass over every loader of a validation (or sanity check) or test stage, one after the
/// other, each for its own number of batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluationLoop {
    /// [`Stage::Test`] runs `test_step` and the test hooks; any other stage validates.
    pub stage: Stage,
    /// Batches to run of each loader, in `dataloader_idx` order.
    pub batches: Vec<usize>,
}

impl EvaluationLoop {
    /// Runs the pass on `model`; returns its epoch metrics (reduced over the ranks), or
    /// [`MissingStep`] at the first batch where the model has no step for this stage. With
    /// several loaders, what a step logs is named after its loader (`/dataloader_idx_N`).
    pub fn run<B, E, I, Bt>(
        &self,
        trainer: &Trainer<B>,
        run: &mut Run,
        model: &E,
        (loaders, batcher): (&[Loader<I>], &Bt),
    ) -> anyhow::Result<BTreeMap<String, f64>>
    where
        B: AutodiffBackend,
        E: LightningModule<Inner<B>>,
        Bt: Batcher<Inner<B>, I, E::Batch>,
        I: Send + 'static,
    {
        let test = self.stage == Stage::Test;
        let mut collector = MetricCollector::default();
        let mut log = StepLog::new(self.stage);
        for (index, (loader, &batches)) in loaders.iter().zip(&self.batches).enumerate() {
            log.set_loader(index, loaders.len());
            run.state.dataloader_idx = index;
            run.state.num_eval_batches = batches;
            let mut all = loader.pass(trainer.seed, 0, 0..batches)?;
            while let Some((i, batch)) = {
                let _span = trainer.profiler.span("data fetch");
                all.next_batch_scoped::<Inner<B>, _>(batcher, &trainer.device, trainer.batch_scope)?
            } {
                let span =
                    trainer
                        .profiler
                        .span(if test { "test step" } else { "validation step" });
                if test {
                    model.test_step(batch, &mut log);
                } else {
                    model.validation_step(batch, &mut log);
                }
                drop(span);
                if let Some(step) = log.take_missing() {
                    return Err(MissingStep(step).into());
                }
                collector.collect(&mut log, false);
                run.state.batch_idx = i;
                run.hook(|c, x| {
                    if test {
                        c.on_test_batch_end(x)
                    } else {
                        c.on_validation_batch_end(x)
                    }
                })?;
            }
        }
        collector.take_epoch(trainer.ranks())
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// The model validation runs on during `fit`: the inner module, in the compute types.
    pub(in crate::trainer) fn eval_model<M: AutodiffModule<B>>(&self, model: &M) -> M::InnerModule {
        let model = model.valid();
        precision::compute_copy(self.precision(), &model).unwrap_or(model)
    }
}
