//! The gradients as the precision plugin sees them under a sharded strategy: each rank holds
//! only its own parameters' gradients, so the global norm (for clipping and for the loss
//! scaler's finiteness check) is made from every rank's parts.
//!
//! The ranks all-gather each gradient's sum of squares (one element per parameter) rather
//! than all-reducing one partial sum: added up in visit order on every rank, they give the
//! norm bitwise as one process (and `ddp`) computes it.

use std::rc::Rc;

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::{DType, TensorData};

use super::partition::Partition;
use crate::collective::{Collective, ReduceOp};
use crate::options::ClipAlgorithm;
use crate::plugins::access::{Gradients, ParallelGradients, not_parallel};
use crate::plugins::device_reduce::DeviceCollective;

/// A rank's gradients, answering norms over all ranks.
pub(super) struct ShardedGradients<'g> {
    pub(super) inner: &'g mut dyn Gradients,
    pub(super) collective: Rc<dyn Collective>,
    pub(super) partition: Rc<Partition>,
}

impl ShardedGradients<'_> {
    /// Every rank's sums of squares, in visit order.
    fn all_squares(&self) -> anyhow::Result<Vec<TensorData>> {
        let mut own = Vec::new();
        let inner = self.inner.parallel().ok_or_else(not_parallel)?;
        for (id, square) in inner.squares() {
            let place = self.partition.place(id).ok_or_else(|| {
                anyhow::anyhow!("parameter {id} has a gradient but is not in the partition")
            })?;
            own.extend_from_slice(&(place as u64).to_le_bytes());
            own.push(dtype_code(square.dtype)?);
            own.extend_from_slice(square.as_bytes());
        }
        let mut by_place: Vec<Option<TensorData>> = vec![None; self.partition.params().len()];
        for part in self.collective.all_gather(&own)? {
            let mut rest = &part[..];
            while !rest.is_empty() {
                anyhow::ensure!(rest.len() >= 9, "a truncated sum of squares");
                let place = u64::from_le_bytes(rest[..8].try_into()?) as usize;
                let dtype = dtype_of(rest[8])?;
                let len = dtype.size();
                anyhow::ensure!(rest.len() >= 9 + len, "a truncated sum of squares");
                let slot = by_place
                    .get_mut(place)
                    .ok_or_else(|| anyhow::anyhow!("a sum of squares for parameter #{place}"))?;
                *slot = Some(TensorData::from_bytes_vec(
                    rest[9..9 + len].to_vec(),
                    [1],
                    dtype,
                ));
                rest = &rest[9 + len..];
            }
        }
        Ok(by_place.into_iter().flatten().collect())
    }
}

/// A float dtype as one byte.
fn dtype_code(dtype: DType) -> anyhow::Result<u8> {
    FLOATS
        .iter()
        .position(|d| *d == dtype)
        .map(|i| i as u8)
        .ok_or_else(|| anyhow::anyhow!("a gradient of dtype {dtype:?}"))
}

fn dtype_of(code: u8) -> anyhow::Result<DType> {
    FLOATS
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| anyhow::anyhow!("a sum of squares of unknown dtype {code}"))
}

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

impl Gradients for ShardedGradients<'_> {
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)> {
        self.inner.take_host()
    }

    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>) {
        self.inner.put_host(grads);
    }

    fn scale(&mut self, factor: f64) {
        self.inner.scale(factor);
    }

    /// The norm over every rank's gradients. The trait gives no way to fail here: a failed
    /// collective ends the run (the other ranks are waiting in it).
    fn global_norm(&self) -> Option<f64> {
        let squares = self.all_squares().unwrap_or_else(|e| self.fail(e));
        self.norm_of_squares(squares)
    }

    /// Whether every rank's gradients are finite: each rank checks its own and the ranks take
    /// the minimum of their answers.
    fn all_finite(&self) -> bool {
        let mut finite = [f64::from(u8::from(self.inner.all_finite()))];
        self.collective
            .all_reduce_f64(&mut finite, ReduceOp::Min)
            .unwrap_or_else(|e| self.fail(e));
        finite[0] == 1.0
    }

    fn clip(&mut self, algorithm: ClipAlgorithm, threshold: f64) {
        match algorithm {
            ClipAlgorithm::Value => self.inner.clip(algorithm, threshold),
            ClipAlgorithm::Norm => {
                let squares = self.all_squares().unwrap_or_else(|e| self.fail(e));
                self.clip_to_norm_of(squares, threshold);
            }
        }
    }

    fn params(&mut self) -> &mut GradientsParams {
        self.inner.params()
    }

    fn parallel(&self) -> Option<&dyn ParallelGradients> {
        Some(self)
    }

    fn parallel_mut(&mut self) -> Option<&mut dyn ParallelGradients> {
        Some(self)
    }
}

/// The rank's own gradients' parts (the inner view's), for a strategy that wraps this view.
impl ParallelGradients for ShardedGradients<'_> {
    fn squares(&self) -> Vec<(ParamId, TensorData)> {
        self.inner_parallel().squares()
    }

    fn norm_of_squares(&self, squares: Vec<TensorData>) -> Option<f64> {
        self.inner_parallel().norm_of_squares(squares)
    }

    fn clip_to_norm_of(&mut self, squares: Vec<TensorData>, max_norm: f64) {
        match self.inner.parallel_mut() {
            Some(inner) => inner.clip_to_norm_of(squares, max_norm),
            None => self.fail(not_parallel()),
        }
    }

    fn average_on_device(
        &mut self,
        collective: &dyn DeviceCollective,
        world_size: usize,
        bucket_cap_bytes: usize,
    ) -> anyhow::Result<usize> {
        self.inner
            .parallel_mut()
            .ok_or_else(not_parallel)?
            .average_on_device(collective, world_size, bucket_cap_bytes)
    }
}

impl ShardedGradients<'_> {
    /// The inner view's parts; a view without them ends the run (its ranks wait in a collective).
    fn inner_parallel(&self) -> &dyn ParallelGradients {
        self.inner
            .parallel()
            .unwrap_or_else(|| self.fail(not_parallel()))
    }

    fn fail(&self, e: anyhow::Error) -> ! {
        eprintln!(
            "error: rank {}: combining the ranks' gradient norms or finiteness: {e:#}",
            self.collective.rank()
        );
        self.collective.abort(1)
    }
}
