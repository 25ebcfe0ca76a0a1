//! The `ddp` strategy: distributed data parallel. Every rank holds a replica, starts from rank
//! 0's weights, trains on its own shard of each epoch, and averages gradients with the other
//! ranks before the optimizer step, so the replicas stay bitwise equal.
//!
//! Gradients travel through host buffers in buckets of at most `bucket_cap_mb` (one
//! all-reduce per bucket); a gradient of a megabyte or more is all-reduced in its own buffer,
//! without the copies into and out of a bucket. burn runs the whole backward pass in one call,
//! so the reduction starts when backward ends instead of overlapping it as torch's DDP does.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use burn::module::ParamId;
use burn::tensor::{DType, TensorData};

use crate::collective::{Collective, ReduceOp};
use crate::plugins::access::Gradients;
use crate::plugins::reduce::{Wire, buckets, scatter_mean};
use crate::plugins::strategy::{Strategy, StrategyParts};
use crate::plugins::weights::Weights;

/// Distributed data parallel over the parts' collective (any [`Collective`]).
pub struct Ddp {
    parts: StrategyParts,
    /// Host buffers reused by every step's buckets.
    scratch_f32: RefCell<Vec<f32>>,
    scratch_f64: RefCell<Vec<f64>>,
}

impl Ddp {
    /// The `ddp` strategy over `parts`.
    pub fn new(parts: StrategyParts) -> Self {
        Self {
            parts,
            scratch_f32: RefCell::default(),
            scratch_f64: RefCell::default(),
        }
    }

    fn world_size(&self) -> usize {
        self.collective().world_size()
    }

    /// Averages every gradient over the ranks, bucket by bucket (f64 gradients in f64, every
    /// other float type in f32). Each bucket is copied once into a reused host buffer,
    /// all-reduced, and divided by the world size on its way back into the gradients' own
    /// buffers; a large gradient is averaged where it lies, by the collective's mean.
    pub fn average_gradients(&self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut taken = grads.take_host();
        if taken.is_empty() {
            return Ok(());
        }
        let (wide, narrow): (Vec<usize>, Vec<usize>) =
            (0..taken.len()).partition(|&i| taken[i].1.dtype == DType::F64);
        let (narrow_bytes, narrow_wait) =
            self.reduce_buckets(&narrow, &mut taken, &self.scratch_f32)?;
        let (wide_bytes, wide_wait) = self.reduce_buckets(&wide, &mut taken, &self.scratch_f64)?;
        let (bytes, in_collective) = (narrow_bytes + wide_bytes, narrow_wait + wide_wait);
        grads.put_host(taken);
        tracing::debug!(
            target: "ember",
            "ddp: averaged {:.1} MB of gradients in {:.1} ms ({:.1} ms in all-reduce)",
            bytes as f64 / 1e6,
            started.elapsed().as_secs_f64() * 1e3,
            in_collective.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Averages the gradients at `indices` of `taken` in `E`: each large one where it lies,
    /// the others bucket by bucket through `scratch`; returns the bytes reduced and the time
    /// spent in the collective.
    fn reduce_buckets<E: Wire>(
        &self,
        indices: &[usize],
        taken: &mut [(ParamId, TensorData)],
        scratch: &RefCell<Vec<E>>,
    ) -> anyhow::Result<(usize, Duration)> {
        let (mut bytes, mut waited) = (0, Duration::ZERO);
        let n = E::from_count(self.world_size());
        let sizes: Vec<usize> = taken.iter().map(|(_, g)| g.num_elements()).collect();
        let (alone, bucketed): (Vec<usize>, Vec<usize>) = indices.iter().partition(|&&i| {
            taken[i].1.dtype == E::dtype() && sizes[i] * size_of::<E>() >= ALONE_BYTES
        });
        for i in alone {
            let own = own_values::<E>(&mut taken[i].1)?;
            let reducing = Instant::now();
            E::mean(self.collective(), own)?;
            waited += reducing.elapsed();
            bytes += std::mem::size_of_val(own);
        }
        let mut flat = scratch.borrow_mut();
        let cap = self.parts.bucket_cap_bytes;
        for bucket in buckets(&bucketed, |i| sizes[i] * size_of::<E>(), cap) {
            flat.clear();
            for &i in &bucket {
                E::append(&taken[i].1, &mut flat)?;
            }
            let reducing = Instant::now();
            E::sum(self.collective(), &mut flat)?;
            waited += reducing.elapsed();
            bytes += flat.len() * size_of::<E>();
            scatter_mean(&bucket, taken, &flat, n)?;
        }
        Ok((bytes, waited))
    }
}

/// Gradients of at least this many bytes (in the type they travel in) are summed in their own
/// buffers, one all-reduce each, instead of being copied into a bucket and back: a collective's
/// fixed cost (tens of microseconds) is small beside those two copies of a megabyte.
const ALONE_BYTES: usize = 1 << 20;

/// `data`'s values as a mutable slice of `E` (its dtype), moved into a buffer aligned for `E`
/// first if its bytes are not.
fn own_values<E: Wire>(data: &mut TensorData) -> anyhow::Result<&mut [E]> {
    if data.as_mut_slice::<E>().is_err() {
        *data = TensorData::new(data.to_vec::<E>()?, data.shape.clone());
    }
    Ok(data.as_mut_slice::<E>()?)
}

impl Strategy for Ddp {
    fn name(&self) -> &str {
        ember_plan::strategy::DDP
    }

    fn parts(&self) -> &StrategyParts {
        &self.parts
    }

    fn parts_mut(&mut self) -> &mut StrategyParts {
        &mut self.parts
    }

    /// Every rank takes rank 0's float weights.
    fn setup_weights(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        if self.world_size() < 2 {
            return Ok(());
        }
        let mut own = weights.to_host();
        let own_len: usize = own.iter().map(|(_, d)| d.as_bytes().len()).sum();
        let mut bytes = Vec::with_capacity(own_len);
        for (_, data) in &own {
            bytes.extend_from_slice(data.as_bytes());
        }
        self.collective().broadcast(&mut bytes, 0)?;
        if bytes.len() != own_len {
            anyhow::bail!(
                "rank {}'s model has {own_len} bytes of float parameters but rank 0's has {}: every rank must build the same model",
                self.collective().rank(),
                bytes.len()
            );
        }
        // Back into the buffers the weights came in (no new allocation, no page to fault in).
        let mut offset = 0;
        for (_, data) in &mut own {
            let len = data.bytes.len();
            data.bytes.copy_from_slice(&bytes[offset..offset + len]);
            offset += len;
        }
        weights.load_host(own)
    }

    /// Averages the gradients over the ranks: on the device through the parts' device
    /// collective when there is one (even with one rank, so its path runs wherever it was
    /// chosen), else through host buffers.
    fn reduce_gradients(&mut self, grads: &mut dyn Gradients) -> anyhow::Result<()> {
        if let Some(device) = &self.parts.device_collective {
            let started = Instant::now();
            let bytes = grads
                .parallel_mut()
                .ok_or_else(crate::plugins::access::not_parallel)?
                .average_on_device(
                    device.as_ref(),
                    self.world_size(),
                    self.parts.bucket_cap_bytes,
                )?;
            tracing::debug!(
                target: "ember",
                "ddp: averaged {:.1} MB of gradients on the device through {} in {:.1} ms",
                bytes as f64 / 1e6,
                device.name(),
                started.elapsed().as_secs_f64() * 1e3
            );
            return Ok(());
        }
        if self.world_size() < 2 {
            return Ok(());
        }
        self.average_gradients(grads)
    }

    /// With `sync_batchnorm`, averages the running statistics over the ranks.
    fn on_optimizer_step(&mut self, weights: &mut dyn Weights, _: u64) -> anyhow::Result<()> {
        if self.world_size() < 2 || !self.parts.sync_batchnorm {
            return Ok(());
        }
        average_buffers(self.collective(), weights)
    }

    /// Fails unless every rank's trained weights are bitwise equal to rank 0's (compared by a
    /// CRC-64 of their bytes).
    fn teardown(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        if self.world_size() < 2 {
            return Ok(());
        }
        check_replicas(self.collective(), &*weights, self.parts.sync_batchnorm)
    }
}

/// Averages the tensors that take no gradient (batch-norm running statistics) over the ranks,
/// in f32 (f64 stays f64), each back in its own dtype.
fn average_buffers(collective: &dyn Collective, weights: &mut dyn Weights) -> anyhow::Result<()> {
    let mut buffers = weights.buffers_to_host();
    if buffers.is_empty() {
        return Ok(());
    }
    let mut flat: Vec<f64> = Vec::new();
    for (_, data) in &buffers {
        flat.extend(data.iter::<f64>());
    }
    collective.all_reduce_f64(&mut flat, ReduceOp::Sum)?;
    let world = collective.world_size() as f64;
    let mut values = flat.into_iter().map(|x| x / world);
    for (_, data) in &mut buffers {
        let (shape, dtype) = (data.shape.clone(), data.dtype);
        let mean: Vec<f64> = values.by_ref().take(data.num_elements()).collect();
        *data = TensorData::new(mean, shape).convert_dtype(dtype);
    }
    weights.load_host(buffers)
}

/// The checksum [`check_replicas`] compares: CRC-64 by sixteen-byte slices (3.7 GB/s on the
/// development VM; the byte-at-a-time table's 0.53 GB/s took ~2 s per gigabyte of weights).
const REPLICA_CRC: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_ECMA_182);

/// Fails unless every rank's float weights are bitwise equal to rank 0's. Tensors that take no
/// gradient (batch-norm running statistics) are compared only `with_buffers`: each rank's
/// follow its own batches unless `sync_batchnorm` averages them.
pub fn check_replicas(
    collective: &dyn Collective,
    weights: &dyn Weights,
    with_buffers: bool,
) -> anyhow::Result<()> {
    let mut digest = REPLICA_CRC.digest();
    let buffers: std::collections::HashSet<ParamId> = match with_buffers {
        true => Default::default(),
        false => weights
            .buffers_to_host()
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    };
    for (_, data) in weights
        .to_host()
        .iter()
        .filter(|(id, _)| !buffers.contains(id))
    {
        digest.update(data.as_bytes());
    }
    let digests = collective.all_gather(&digest.finalize().to_le_bytes())?;
    let differ: Vec<usize> = (1..digests.len())
        .filter(|&r| digests[r] != digests[0])
        .collect();
    if !differ.is_empty() {
        anyhow::bail!(
            "the replicas diverged: the weights of rank(s) {differ:?} differ from rank 0's after fit"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
