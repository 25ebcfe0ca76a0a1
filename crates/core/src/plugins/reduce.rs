//! Gradients on the wire: the float types they travel in between ranks and the buckets
//! they travel in, shared by `ddp` and `ddp_sharded`.

use burn::module::ParamId;
use burn::tensor::{DType, TensorData};

use crate::collective::{Collective, ReduceOp};

/// A float type gradients travel in: f64 for f64 gradients, f32 for every other float type.
pub(crate) trait Wire: burn::tensor::Element + std::ops::Div<Output = Self> {
    /// `n` in this type.
    fn from_count(n: usize) -> Self;
    /// Appends `data`'s values.
    fn append(data: &TensorData, flat: &mut Vec<Self>) -> anyhow::Result<()>;
    /// Sums `buf` over the ranks.
    fn sum(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()>;
    /// Averages `buf` over the ranks (bitwise its sum divided by their number).
    fn mean(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()>;
    /// Sums `buf` over the ranks, each rank receiving its part (`counts`) in `out`.
    fn sum_scatter(
        collective: &dyn Collective,
        buf: &[Self],
        counts: &[usize],
        out: &mut [Self],
    ) -> anyhow::Result<()>;
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
    fn mean(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()> {
        collective.all_reduce_mean_f32(buf)
    }
    fn sum_scatter(
        collective: &dyn Collective,
        buf: &[Self],
        counts: &[usize],
        out: &mut [Self],
    ) -> anyhow::Result<()> {
        collective.reduce_scatter_f32(buf, counts, out, ReduceOp::Sum)
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
    fn mean(collective: &dyn Collective, buf: &mut [Self]) -> anyhow::Result<()> {
        collective.all_reduce_mean_f64(buf)
    }
    fn sum_scatter(
        collective: &dyn Collective,
        buf: &[Self],
        counts: &[usize],
        out: &mut [Self],
    ) -> anyhow::Result<()> {
        collective.reduce_scatter_f64(buf, counts, out, ReduceOp::Sum)
    }
}

/// Consecutive runs of `indices` whose sizes (`bytes` of an index) add up to at most `cap`
/// (a larger one gets a bucket of its own).
pub(crate) fn buckets(
    indices: &[usize],
    bytes: impl Fn(usize) -> usize,
    cap: usize,
) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for &i in indices {
        let bytes = bytes(i);
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
pub(crate) fn scatter_mean<E: Wire>(
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
