//! The prediction loop: `predict_step` over the predict loader's batches. With several ranks
//! each predicts a contiguous run of the batches (the same batches one process would make)
//! and rank 0 gathers them back in dataset order.

use std::ops::Range;

use anyhow::Context;
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::AutodiffBackend;
use serde_json::Value;

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
}

impl PredictionLoop {
    /// Runs `predict_step` on this rank's batches; returns every prediction in batch order on
    /// rank 0 (and in a one-process run), nothing on the other ranks.
    pub fn run<B, P, I, Bt>(
        self,
        trainer: &Trainer<B>,
        run: &mut Run,
        model: &P,
        (loader, batcher): (&Loader<I>, &Bt),
    ) -> anyhow::Result<Vec<Value>>
    where
        B: AutodiffBackend,
        P: LightningModule<Inner<B>>,
        Bt: Batcher<Inner<B>, I, P::Batch>,
        I: Send + 'static,
    {
        let mine = batches_of(trainer.shard(), self.batches.min(loader.num_batches()));
        run.state.num_eval_batches = mine.len();
        let mut outputs = Vec::with_capacity(mine.len());
        let first = mine.start;
        let mut batches = loader.pass(trainer.seed, 0, mine)?;
        while let Some((batch_idx, batch)) = {
            let _span = trainer.profiler.span("data fetch");
            batches.next_batch_scoped::<Inner<B>, _>(
                batcher,
                &trainer.device,
                trainer.batch_scope,
            )?
        } {
            let i = batch_idx - first;
            let span = trainer.profiler.span("predict step");
            outputs.push(model.predict_step(batch).into_value()?);
            drop(span);
            run.state.batch_idx = i;
            run.hook(|c, x| c.on_predict_batch_end(x))?;
        }
        let Some(ranks) = trainer.ranks() else {
            return Ok(outputs);
        };
        let bytes = serde_json::to_vec(&outputs).context("encoding this rank's predictions")?;
        let gathered = ranks.all_gather(&bytes)?;
        if ranks.rank() != 0 {
            return Ok(Vec::new());
        }
        let mut all = Vec::with_capacity(self.batches);
        for (rank, bytes) in gathered.iter().enumerate() {
            let part: Vec<Value> = serde_json::from_slice(bytes)
                .with_context(|| format!("decoding the predictions of rank {rank}"))?;
            all.extend(part);
        }
        Ok(all)
    }
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
