//! The prediction loop: `predict_step` over the predict loader's batches, each handed to the
//! callbacks as it is made. With several ranks each predicts a contiguous run of the batches
//! (the same batches one process would make); rank 0 gathers what they kept back in dataset
//! order.

use std::ops::Range;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::AutodiffBackend;
use serde_json::Value;

use crate::callbacks::PredictedBatch;
use crate::plugins::shard::Shard;
use crate::trainer::data::Loader;
use crate::trainer::module::LightningModule;
use crate::trainer::run::Run;
use crate::trainer::{Inner, Trainer};

/// Predictions for the first `batches` batches of a loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionLoop {
    /// Batches to predict, across all ranks.
    pub batches: usize,
    /// Whether the predictions are kept after the callbacks saw them (to be returned, or for
    /// a callback's `on_predict_epoch_end`).
    pub keep: bool,
}

impl PredictionLoop {
    /// Runs `predict_step` on this rank's batches and hands each prediction to the callbacks;
    /// returns this rank's, in batch order, when they are kept.
    pub fn run<B, P, I, Bt>(
        self,
        trainer: &Trainer<B>,
        run: &mut Run,
        model: &P,
        (loader, batcher): (&Loader<I>, &Bt),
    ) -> anyhow::Result<Vec<PredictedBatch>>
    where
        B: AutodiffBackend,
        P: LightningModule<Inner<B>>,
        Bt: Batcher<Inner<B>, I, P::Batch>,
        I: Send + 'static,
    {
        let mine = batches_of(trainer.shard(), self.batches.min(loader.num_batches()));
        run.state.num_eval_batches = mine.len();
        let mut kept = Vec::with_capacity(if self.keep { mine.len() } else { 0 });
        let first = mine.start;
        let mut indices = loader.batch_order(trainer.seed, 0).skip(first);
        let mut batches = loader.pass(trainer.seed, 0, mine)?;
        while let Some((batch_idx, batch)) = {
            let _span = trainer.profiler.span("data fetch");
            batches.next_batch_scoped::<Inner<B>, _>(
                batcher,
                &trainer.device,
                trainer.batch_scope,
            )?
        } {
            let span = trainer.profiler.span("predict step");
            let predicted = PredictedBatch {
                dataloader_idx: run.state.dataloader_idx,
                batch_idx,
                batch_indices: indices.next().unwrap_or_default(),
                prediction: model.predict_step(batch).into_value()?,
            };
            drop(span);
            run.state.batch_idx = batch_idx - first;
            run.hook(|c, x| c.on_predict_batch_end(x, &predicted))?;
            if self.keep {
                kept.push(predicted);
            }
        }
        Ok(kept)
    }
}

/// Every rank's `predictions` of one loader, in rank order (which is batch order), on rank 0;
/// none on the other ranks. One process's are its own.
pub fn gather<B: AutodiffBackend>(
    trainer: &Trainer<B>,
    predictions: Vec<Value>,
) -> anyhow::Result<Vec<Value>> {
    let Some(ranks) = trainer.ranks() else {
        return Ok(predictions);
    };
    let bytes = serde_json::to_vec(&predictions).context("encoding this rank's predictions")?;
    let gathered = ranks.all_gather(&bytes)?;
    if ranks.rank() != 0 {
        return Ok(Vec::new());
    }
    let mut all = Vec::new();
    for (rank, bytes) in gathered.iter().enumerate() {
        let part: Vec<Value> = serde_json::from_slice(bytes)
            .with_context(|| format!("decoding the predictions of rank {rank}"))?;
        all.extend(part);
    }
    Ok(all)
}

/// The contiguous batches rank `shard.rank` predicts of `total`: as even a split as can be,
/// the first ranks taking one more.
pub fn batches_of(shard: Shard, total: usize) -> Range<usize> {
    let (each, extra) = (total / shard.world, total % shard.world);
    let start = shard.rank * each + shard.rank.min(extra);
    start..start + each + usize::from(shard.rank < extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_split_the_batches_contiguously_and_cover_them_once() {
        for (world, total) in [(1, 5), (2, 5), (3, 7), (4, 2), (2, 0)] {
            let ranges: Vec<Range<usize>> = (0..world)
                .map(|rank| batches_of(Shard { rank, world }, total))
                .collect();
            let flat: Vec<usize> = ranges.iter().cloned().flatten().collect();
            assert_eq!(
                flat,
                (0..total).collect::<Vec<_>>(),
                "{world} ranks, {total}"
            );
            let sizes: Vec<usize> = ranges.iter().map(ExactSizeIterator::len).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        }
    }
}
