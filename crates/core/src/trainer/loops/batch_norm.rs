//! Recomputing batch-norm statistics for the weights the model holds (torch's `update_bn`), which
//! StochasticWeightAveraging asks for when it has loaded its average at the end of `fit`.
//!
//! torch resets the statistics and sets each layer's momentum to `None`, so that one forward pass
//! over the training data leaves the equally weighted mean of every batch's statistics. burn's
//! `BatchNorm` keeps its momentum `m` in a field no visitor reaches, and each forward in training
//! mode sets `running = (1 − m)·running + m·batch`. So each batch runs with the statistics set to
//! 0, which leaves `m·batch`; `m` itself comes from the first batch run twice with the same seed
//! (same dropout), the second time from 1, which leaves `1 − m + m·batch`. The mean of the
//! batches' statistics is then exact up to float rounding.

use std::collections::HashMap;

use anyhow::Context;

use burn::module::{ModuleVisitor, Param, ParamId};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};

use super::fit::FitLoop;
use super::training_epoch::batch_seed;
use crate::plugins::weights::{ModelWeights, Weights};
use crate::stage::Stage;
use crate::trainer::data::Loader;
use crate::trainer::log::StepLog;
use crate::trainer::module::{BatcherFor, TrainingModule};

impl<B, M> FitLoop<'_, B, M>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    /// Sets every batch-norm layer's running mean and variance to the mean of the training
    /// batches' statistics under the model's current weights (one forward pass in training
    /// mode, no backward, nothing logged); a model without batch norm is left as it is.
    pub(super) fn recompute_batch_norm<I, Bt>(
        &mut self,
        train: &Loader<I>,
        batcher: &Bt,
    ) -> anyhow::Result<()>
    where
        Bt: BatcherFor<B, I, M>,
        I: Send + 'static,
    {
        let mut find = FindBatchNorm::default();
        self.opt.model.visit(&mut find);
        let epoch = self.position.epoch;
        let count = train.num_batches().min(self.schedule.train_batches);
        if find.stats.is_empty() || count == 0 {
            return Ok(());
        }
        let (seed, device) = (self.trainer.seed, self.trainer.device.clone());
        let scope = self.trainer.batch_scope;
        let rank = self.trainer.shard().rank;
        // The first batch is run twice: with momentum 1 and 0, which tells each layer's
        // momentum from the two running statistics.
        let first = train
            .pass(seed, epoch, 0..1)?
            .next_batch_scoped(batcher, &device, scope)?;
        let (_, first) = first.context("the training loader has no batch")?;
        let ones = self.forward_from(1.0, batch_seed(seed, epoch, 0, rank), first, &find.stats)?;
        let mut sums: HashMap<ParamId, Vec<f64>> = HashMap::new();
        let mut momentum: HashMap<ParamId, Vec<f64>> = HashMap::new();
        let mut batches = train.pass(seed, epoch, 0..count)?;
        while let Some((batch_idx, batch)) = batches.next_batch_scoped(batcher, &device, scope)? {
            let step_seed = batch_seed(seed, epoch, batch_idx, rank);
            let stats = self.forward_from(0.0, step_seed, batch, &find.stats)?;
            if batch_idx == 0 {
                for (id, one) in &ones {
                    let zero = &stats[id];
                    let m = one.iter().zip(zero).map(|(o, z)| 1.0 - (o - z)).collect();
                    momentum.insert(*id, m);
                }
                sums = stats;
            } else {
                for (id, values) in stats {
                    let sum = sums.get_mut(&id).expect("the same layers every batch");
                    sum.iter_mut().zip(values).for_each(|(s, v)| *s += v);
                }
            }
        }
        let count = count as f64;
        let mut weights = ModelWeights::<B, M>::new(&mut self.opt.model);
        let dtypes: HashMap<ParamId, _> = (weights
            .to_host_where(&mut |id| find.stats.contains(&id)))
        .into_iter()
        .map(|(id, data)| (id, (data.dtype, data.shape)))
        .collect();
        let mean = sums.into_iter().map(|(id, sum)| {
            let m = &momentum[&id];
            let values: Vec<f64> = sum.iter().zip(m).map(|(s, m)| s / (m * count)).collect();
            let (dtype, shape) = dtypes[&id].clone();
            (id, TensorData::new(values, shape).convert_dtype(dtype))
        });
        weights.load_host(mean.collect())?;
        tracing::info!(target: "ember", "recomputed the batch-norm statistics over {count} batches");
        Ok(())
    }

    /// Sets the batch-norm statistics to `value`, runs the training step's forward on `batch`
    /// with the backend seeded with `seed`, and reads the statistics it left.
    fn forward_from(
        &mut self,
        value: f64,
        seed: u64,
        batch: M::Batch,
        stats: &[ParamId],
    ) -> anyhow::Result<HashMap<ParamId, Vec<f64>>> {
        let mut weights = ModelWeights::<B, M>::new(&mut self.opt.model);
        let set = weights
            .to_host_where(&mut |id| stats.contains(&id))
            .into_iter()
            .map(|(id, data)| {
                let filled = vec![value; data.num_elements()];
                (
                    id,
                    TensorData::new(filled, data.shape).convert_dtype(data.dtype),
                )
            })
            .collect();
        weights.load_host(set)?;
        B::seed(&self.trainer.device, seed);
        let mut log = StepLog::new(Stage::Fit);
        let _loss: Tensor<B, 1> = self.training_forward(batch, &mut log);
        let weights = ModelWeights::<B, M>::new(&mut self.opt.model);
        let left = weights.to_host_where(&mut |id| stats.contains(&id));
        left.into_iter()
            .map(|(id, data)| Ok((id, data.iter::<f64>().collect())))
            .collect()
    }
}

/// The ids of burn `BatchNorm` layers' running means and variances.
#[derive(Default)]
struct FindBatchNorm {
    /// The field names and container types entered.
    path: Vec<(String, String)>,
    stats: Vec<ParamId>,
}

impl<B: Backend> ModuleVisitor<B> for FindBatchNorm {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_owned(), container_type.to_owned()));
    }

    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((name, container)) = self.path.last() {
            let running = name == "running_mean" || name == "running_var";
            if running && container == "Struct:BatchNorm" {
                self.stats.push(param.id);
            }
        }
    }
}
