//! The `ddp_sharded` strategy: data parallel with the optimizer's state and the gradients
//! partitioned over the ranks (ZeRO stages 1 and 2, as torch's `ZeroRedundancyOptimizer`
//! and fairscale's OSS, which Lightning's `ddp_sharded` used).
//!
//! Each trainable parameter is owned by one rank ([`Partition`]). After backward the
//! gradients are reduce-scattered: each rank receives the averaged gradients of the
//! parameters it owns and drops the others, so its optimizer updates, and keeps state for,
//! its own parameters only. After the step every rank all-gathers the owners' updated
//! parameters. Norms (clipping, the loss scaler's check) are made from every rank's parts
//! (`norm.rs`). Everything else — rank 0's starting weights, `sync_batchnorm`, the replica
//! check at the end — is `ddp`'s. Checkpoints gather the optimizer's state on rank 0 (the
//! Trainer does that for any strategy whose [`Strategy::optimizer_sharding`] says so).

mod norm;
pub mod partition;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Instant;

use burn::module::ParamId;
use burn::tensor::{DType, TensorData};

use self::norm::ShardedGradients;
pub use self::partition::Partition;
use crate::plugins::access::Gradients;
use crate::plugins::ddp::Ddp;
use crate::plugins::reduce::{Wire, buckets, scatter_mean};
use crate::plugins::strategy::{OptimizerSharding, Strategy, StrategyParts};
use crate::plugins::weights::Weights;

/// Sharded data parallel over the parts' collective.
pub struct DdpSharded {
    ddp: Ddp,
    /// Built from the model when `fit` starts (or restores a checkpoint).
    partition: Option<Rc<Partition>>,
    /// Host buffers reused by every step's buckets.
    scratch_f32: RefCell<(Vec<f32>, Vec<f32>)>,
    scratch_f64: RefCell<(Vec<f64>, Vec<f64>)>,
}

impl DdpSharded {
    /// The `ddp_sharded` strategy over `parts`.
    pub fn new(parts: StrategyParts) -> Self {
        Self {
            ddp: Ddp::new(parts),
            partition: None,
            scratch_f32: RefCell::default(),
            scratch_f64: RefCell::default(),
        }
    }

    /// The partition of this model's parameters (built again for every model: ids differ).
    pub fn partition_of(&mut self, weights: &dyn Weights) -> Rc<Partition> {
        let world = self.collective().world_size();
        let partition = Rc::new(Partition::balanced(weights.trainable(), world));
        self.partition = Some(Rc::clone(&partition));
        partition
    }

    fn partition(&self) -> anyhow::Result<Rc<Partition>> {
        self.partition.clone().ok_or_else(|| {
            anyhow::anyhow!("ddp_sharded: no partition yet (setup_weights was not called)")
        })
    }

    fn rank(&self) -> usize {
        self.collective().rank()
    }

    /// Averages the gradients over the ranks, each rank keeping its own parameters' only.
    fn reduce_scatter_gradients(&self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        let started = Instant::now();
        let partition = self.partition()?;
        let mut taken = grads.take_host();
        let mut places = Vec::with_capacity(taken.len());
        for (id, _) in &taken {
            places.push(partition.place(*id).ok_or_else(|| {
                anyhow::anyhow!("parameter {id} has a gradient but is not in the partition")
            })?);
        }
        // Each rank's gradients consecutive, in visit order within a rank.
        let mut order: Vec<usize> = (0..taken.len()).collect();
        order.sort_by_key(|&i| (partition.owner(places[i]), places[i]));
        let (wide, narrow): (Vec<usize>, Vec<usize>) = order
            .into_iter()
            .partition(|&i| taken[i].1.dtype == DType::F64);
        let owner = |i: usize| partition.owner(places[i]);
        self.scatter(&narrow, &mut taken, &owner, &self.scratch_f32)?;
        self.scatter(&wide, &mut taken, &owner, &self.scratch_f64)?;
        let rank = self.rank();
        let own: Vec<(ParamId, TensorData)> = taken
            .into_iter()
            .zip(&places)
            .filter(|(_, place)| partition.owner(**place) == rank)
            .map(|(grad, _)| grad)
            .collect();
        grads.put_host(own);
        tracing::debug!(
            target: "ember",
            "ddp_sharded: reduce-scattered the gradients in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Reduce-scatters the gradients at `indices` of `taken` (grouped by owner) in `E`,
    /// bucket by bucket; this rank's come back averaged, in their own dtypes.
    fn scatter<E: Wire>(
        &self,
        indices: &[usize],
        taken: &mut [(ParamId, TensorData)],
        owner: &dyn Fn(usize) -> usize,
        scratch: &RefCell<(Vec<E>, Vec<E>)>,
    ) -> anyhow::Result<()> {
        let (rank, world) = (self.rank(), self.collective().world_size());
        let mut scratch = scratch.borrow_mut();
        let (flat, out) = &mut *scratch;
        let cap = self.parts().bucket_cap_bytes;
        let sizes: Vec<usize> = taken.iter().map(|(_, g)| g.num_elements()).collect();
        for bucket in buckets(indices, |i| sizes[i] * size_of::<E>(), cap) {
            flat.clear();
            let mut counts = vec![0; world];
            for &i in &bucket {
                E::append(&taken[i].1, flat)?;
                counts[owner(i)] += sizes[i];
            }
            out.clear();
            out.resize(counts[rank], E::from_count(0));
            E::sum_scatter(self.collective(), flat, &counts, out)?;
            let own: Vec<usize> = bucket.into_iter().filter(|&i| owner(i) == rank).collect();
            scatter_mean(&own, taken, out, E::from_count(world))?;
        }
        Ok(())
    }

    /// Every rank takes the owners' updated parameters, bucket by bucket.
    fn gather_parameters(&self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        let started = Instant::now();
        let partition = self.partition()?;
        let (rank, world) = (self.rank(), self.collective().world_size());
        let params = partition.params();
        let cap = self.parts().bucket_cap_bytes;
        for bucket in buckets(&partition.owner_major(), |p| params[p].bytes(), cap) {
            let mut counts = vec![0; world];
            for &p in &bucket {
                counts[partition.owner(p)] += params[p].bytes();
            }
            // This rank's parameters in the bucket, read one bucket at a time (in visit
            // order, which is the bucket's order within one owner).
            let wanted: HashSet<ParamId> = (bucket.iter())
                .filter(|&&p| partition.owner(p) == rank)
                .map(|&p| params[p].id)
                .collect();
            let mut mine = Vec::with_capacity(counts[rank]);
            for (_, data) in weights.to_host_where(&mut |id| wanted.contains(&id)) {
                mine.extend_from_slice(data.as_bytes());
            }
            let mut all = vec![0u8; counts.iter().sum()];
            self.collective()
                .all_gather_into(&mine, &counts, &mut all)?;
            let mut at = 0;
            let mut others = Vec::new();
            for &p in &bucket {
                let (param, len) = (&params[p], params[p].bytes());
                if partition.owner(p) != rank {
                    let bytes = all[at..at + len].to_vec();
                    let data = TensorData::from_bytes_vec(bytes, param.shape.clone(), param.dtype);
                    others.push((param.id, data));
                }
                at += len;
            }
            weights.load_host(others)?;
        }
        tracing::debug!(
            target: "ember",
            "ddp_sharded: gathered the updated parameters in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(())
    }
}

impl Strategy for DdpSharded {
    fn name(&self) -> &str {
        ember_plan::strategy::DDP_SHARDED
    }

    fn parts(&self) -> &StrategyParts {
        self.ddp.parts()
    }

    fn parts_mut(&mut self) -> &mut StrategyParts {
        self.ddp.parts_mut()
    }

    /// Every rank takes rank 0's weights (as `ddp`) and deals the parameters out.
    fn setup_weights(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.ddp.setup_weights(weights)?;
        let partition = self.partition_of(&*weights);
        tracing::debug!(
            target: "ember",
            "ddp_sharded: parameter bytes by rank {:?}",
            partition.loads()
        );
        Ok(())
    }

    fn reduce_gradients(&mut self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        if self.collective().world_size() < 2 {
            return Ok(());
        }
        self.reduce_scatter_gradients(grads)
    }

    fn precision_view<'g>(&self, grads: &'g mut dyn Gradients) -> Box<dyn Gradients + 'g> {
        match self.partition.clone() {
            Some(partition) if self.collective().world_size() > 1 => Box::new(ShardedGradients {
                inner: grads,
                collective: Rc::clone(&self.parts().collective),
                partition,
            }),
            _ => Box::new(grads),
        }
    }

    /// Gathers the updated parameters, then (with `sync_batchnorm`) averages the buffers.
    fn on_optimizer_step(
        &mut self,
        weights: &mut dyn Weights,
        global_step: u64,
    ) -> anyhow::Result<()> {
        if self.collective().world_size() < 2 {
            return Ok(());
        }
        self.gather_parameters(weights)?;
        self.ddp.on_optimizer_step(weights, global_step)
    }

    fn optimizer_sharding(&mut self) -> Option<&mut dyn OptimizerSharding> {
        Some(self)
    }

    fn teardown(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.ddp.teardown(weights)
    }
}

impl OptimizerSharding for DdpSharded {
    fn owned(&mut self, weights: &dyn Weights) -> Option<HashSet<ParamId>> {
        if self.collective().world_size() < 2 {
            return None;
        }
        let rank = self.rank();
        let partition = self.partition_of(weights);
        let owned = partition.params().iter().map(|p| p.id);
        Some(owned.filter(|&id| partition.owns(rank, id)).collect())
    }

    /// Fails unless this rank holds optimizer state for its own parameters only.
    fn check(&self, held: &[(ParamId, u64)]) -> anyhow::Result<()> {
        let Some(partition) = self.partition.as_ref() else {
            return Ok(());
        };
        let rank = self.rank();
        if let Some((id, _)) = held.iter().find(|(id, _)| !partition.owns(rank, *id)) {
            anyhow::bail!(
                "ddp_sharded: rank {rank} holds optimizer state for parameter {id}, which it does not own"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
