//! Distributed data parallel inside the loops: every rank holds a replica, starts from rank 0's
//! weights, trains on its own shard of each epoch, and averages gradients with the other ranks
//! before the optimizer step, so the replicas stay bitwise equal.
//!
//! Gradients travel through host buffers in buckets of at most `bucket_cap_mb` (one
//! all-reduce per bucket). burn runs the whole backward pass in one call, so the reduction
//! starts when backward ends instead of overlapping it as torch's DDP does.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};

use crate::collective::{Collective, ReduceOp};

/// The data-parallel side of a Trainer: the collective and the bucket size.
#[derive(Clone)]
pub struct Ddp {
    /// The run's collective.
    pub collective: Rc<dyn Collective>,
    /// Bytes per gradient bucket.
    pub bucket_cap_bytes: usize,
    /// Host buffers reused by every step's buckets.
    scratch_f32: RefCell<Vec<f32>>,
    scratch_f64: RefCell<Vec<f64>>,
}

impl Ddp {
    /// Data parallelism over `collective` with buckets of `bucket_cap_bytes`.
    pub fn new(collective: Rc<dyn Collective>, bucket_cap_bytes: usize) -> Self {
        Self {
            collective,
            bucket_cap_bytes,
            scratch_f32: RefCell::default(),
            scratch_f64: RefCell::default(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.collective.rank()
    }

    /// Processes in the run.
    pub fn world_size(&self) -> usize {
        self.collective.world_size()
    }

    /// Rank 0's value of `x` on every rank.
    pub fn broadcast_u64(&self, x: u64) -> anyhow::Result<u64> {
        let mut bytes = x.to_le_bytes().to_vec();
        self.collective.broadcast(&mut bytes, 0)?;
        let bytes: [u8; 8] = bytes
            .try_into()
            .map_err(|_| anyhow::anyhow!("rank 0 broadcast a value that is not 8 bytes"))?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Replaces every float parameter of `model` with rank 0's.
    pub fn broadcast_module<B: Backend, M: Module<B>>(&self, model: M) -> anyhow::Result<M> {
        let mut gather = GatherParams::default();
        model.visit(&mut gather);
        let own_len = gather.bytes.len();
        let mut bytes = gather.bytes;
        self.collective.broadcast(&mut bytes, 0)?;
        if bytes.len() != own_len {
            anyhow::bail!(
                "rank {}'s model has {own_len} bytes of float parameters but rank 0's has {}: every rank must build the same model",
                self.rank(),
                bytes.len()
            );
        }
        Ok(model.map(&mut ScatterParams { bytes, offset: 0 }))
    }

    /// Fails unless every rank's float parameters are bitwise equal to rank 0's (compared by a
    /// CRC-64 of their bytes; run once at the end of `fit`).
    pub fn check_replicas<B: Backend, M: Module<B>>(&self, model: &M) -> anyhow::Result<()> {
        let mut gather = GatherParams::default();
        model.visit(&mut gather);
        let digest = crc::Crc::<u64>::new(&crc::CRC_64_ECMA_182).checksum(&gather.bytes);
        let digests = self.collective.all_gather(&digest.to_le_bytes())?;
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

    /// Averages `grads` over the ranks, bucket by bucket (f64 gradients in f64, every other
    /// float type in f32). Each bucket is copied once into a reused host buffer, all-reduced,
    /// and divided by the world size on its way back into the gradients' own buffers.
    pub fn average_gradients<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        model: &M,
        grads: &mut GradientsParams,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut take = TakeGrads::<B> {
            grads,
            taken: Vec::new(),
            device: None,
        };
        model.visit(&mut take);
        let (Some(device), mut taken) = (take.device, take.taken) else {
            return Ok(());
        };
        let (wide, narrow): (Vec<usize>, Vec<usize>) =
            (0..taken.len()).partition(|&i| taken[i].1.dtype == DType::F64);
        let (narrow_bytes, narrow_wait) =
            self.reduce_buckets(&narrow, &mut taken, &self.scratch_f32)?;
        let (wide_bytes, wide_wait) = self.reduce_buckets(&wide, &mut taken, &self.scratch_f64)?;
        let (bytes, in_collective) = (narrow_bytes + wide_bytes, narrow_wait + wide_wait);
        model.visit(&mut PutGrads::<B> {
            grads,
            data: taken.into_iter().collect(),
            device,
        });
        tracing::debug!(
            target: "ember",
            "ddp: averaged {:.1} MB of gradients in {:.1} ms ({:.1} ms in all-reduce)",
            bytes as f64 / 1e6,
            started.elapsed().as_secs_f64() * 1e3,
            in_collective.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Averages the gradients at `indices` of `taken` in `E`, bucket by bucket through
    /// `scratch`; returns the bytes reduced and the time spent in the collective.
    fn reduce_buckets<E: Wire>(
        &self,
        indices: &[usize],
        taken: &mut [(ParamId, TensorData)],
        scratch: &RefCell<Vec<E>>,
    ) -> anyhow::Result<(usize, Duration)> {
        let mut flat = scratch.borrow_mut();
        let (mut bytes, mut waited) = (0, Duration::ZERO);
        for bucket in buckets(indices, taken, size_of::<E>(), self.bucket_cap_bytes) {
            flat.clear();
            for &i in &bucket {
                E::append(&taken[i].1, &mut flat)?;
            }
            let reducing = Instant::now();
            E::sum(self.collective.as_ref(), &mut flat)?;
            waited += reducing.elapsed();
            bytes += flat.len() * size_of::<E>();
            scatter_mean(&bucket, taken, &flat, E::from_count(self.world_size()))?;
        }
        Ok((bytes, waited))
    }
}

/// A float type gradients travel in: f64 for f64 gradients, f32 for every other float type.
trait Wire: burn::tensor::Element + std::ops::Div<Output = Self> {
    /// `n` in this type.
    fn from_count(n: usize) -> Self;
    /// Appends `data`'s values.
    fn append(data: &TensorData, flat: &mut Vec<Self>) -> anyhow::Result<()>;
    /// Sums `buf` over the ranks.
    fn sum(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()>;
}

impl Wire for f32 {
    fn from_count(n: usize) -> Self {
        n as f32
    }
    fn append(data: &TensorData, flat: &mut Vec<Self>) -> anyhow::Result<()> {
        match data.as_slice::<f32>() {
            Ok(values) => flat.extend_from_slice(values),
            Err(_) => flat.extend(data.clone().convert_dtype(DType::F32).iter::<f32>()),
        }
        Ok(())
    }
    fn sum(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()> {
        collective.all_reduce_f32(buf, ReduceOp::Sum)
    }
}

impl Wire for f64 {
    fn from_count(n: usize) -> Self {
        n as f64
    }
    fn append(data: &TensorData, flat: &mut Vec<Self>) -> anyhow::Result<()> {
        flat.extend_from_slice(data.as_slice::<f64>()?);
        Ok(())
    }
    fn sum(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()> {
        collective.all_reduce_f64(buf, ReduceOp::Sum)
    }
}

/// Consecutive runs of `indices` whose gradients fit in `cap` bytes (a larger gradient gets a
/// bucket of its own).
fn buckets(
    indices: &[usize],
    taken: &[(ParamId, TensorData)],
    elem_bytes: usize,
    cap: usize,
) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for &i in indices {
        let bytes = taken[i].1.num_elements() * elem_bytes;
        match out.last_mut() {
            Some(last) if size + bytes <= cap => {
                last.push(i);
                size += bytes;
            }
            _ => {
                out.push(vec![i]);
                size = bytes;
            }
        }
    }
    out
}

/// Puts a summed bucket back into the gradients it came from, divided by `n`, in their
/// own dtypes.
fn scatter_mean<E: Wire>(
    bucket: &[usize],
    taken: &mut [(ParamId, TensorData)],
    flat: &[E],
    n: E,
) -> anyhow::Result<()> {
    let mut offset = 0;
    for &i in bucket {
        let data = &mut taken[i].1;
        let len = data.num_elements();
        let sums = &flat[offset..offset + len];
        offset += len;
        match data.as_mut_slice::<E>() {
            Ok(own) => own.iter_mut().zip(sums).for_each(|(g, &s)| *g = s / n),
            Err(_) => {
                let dtype = data.dtype;
                let mean: Vec<E> = sums.iter().map(|&s| s / n).collect();
                *data = TensorData::new(mean, data.shape.clone()).convert_dtype(dtype);
            }
        }
    }
    Ok(())
}

/// Removes every float gradient of a model, in visit order, as host data.
struct TakeGrads<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    taken: Vec<(ParamId, TensorData)>,
    device: Option<burn::tensor::Device<B::InnerBackend>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            self.device.get_or_insert_with(|| g.device());
            self.taken.push((param.id, g.into_data()));
        }
    }
}

/// Registers reduced gradients again.
struct PutGrads<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    data: HashMap<ParamId, TensorData>,
    device: burn::tensor::Device<B::InnerBackend>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for PutGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(data) = self.data.remove(&param.id) {
            let dtype = data.dtype;
            let g = Tensor::<B::InnerBackend, D>::from_data(data, (&self.device, dtype));
            self.grads.register(param.id, g);
        }
    }
}

/// Every float parameter's bytes, concatenated in visit order.
#[derive(Default)]
struct GatherParams {
    bytes: Vec<u8>,
}

impl<B: Backend> ModuleVisitor<B> for GatherParams {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.bytes
            .extend_from_slice(param.val().into_data().as_bytes());
    }
}

/// Replaces every float parameter with the next bytes of a [`GatherParams`] buffer.
struct ScatterParams {
    bytes: Vec<u8>,
    offset: usize,
}

impl<B: Backend> ModuleMapper<B> for ScatterParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|t| {
            let (shape, dtype, device) = (t.shape(), t.dtype(), t.device());
            let len = shape.num_elements() * dtype.size();
            let bytes = self.bytes[self.offset..self.offset + len].to_vec();
            self.offset += len;
            let require_grad = t.is_require_grad();
            Tensor::from_data(
                TensorData::from_bytes_vec(bytes, shape, dtype),
                (&device, dtype),
            )
            .set_require_grad(require_grad)
        })
    }
}
