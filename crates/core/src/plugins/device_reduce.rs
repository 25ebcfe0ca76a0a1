//! Gradients averaged on the device: `ddp`'s path when the accelerator has a collective that
//! reads and writes device memory (NCCL between CUDA ranks), so gradients never visit the host.
//!
//! The bucketing is the host path's (visit order, `ddp_bucket_cap_mb`, f64 gradients in f64
//! and every other float type in f32): each bucket is one fresh flat tensor made on the device
//! by concatenating the gradients, summed over the ranks by the [`DeviceCollective`], divided
//! by the world size, and cut back into the gradients in their own dtypes and shapes. Only the
//! sum is the accelerator's; the rest is ordinary burn ops, the same on every backend.

use std::any::Any;
use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Tensor, TensorPrimitive};

use crate::plugins::reduce::buckets;

/// A sum over the ranks that runs on the accelerator's device, built by
/// [`Accelerator::device_collective`](crate::Accelerator::device_collective) when a `ddp`
/// run's plan names it as its process group backend.
pub trait DeviceCollective {
    /// The name the plan and `--trainer.plugins` use for it, e.g. `nccl`.
    fn name(&self) -> &str;

    /// Sums `flat` over the ranks and leaves the sum in it (in place, or by replacing it).
    ///
    /// `flat` is a `<B as BackendTypes>::FloatTensorPrimitive` of the accelerator's inner backend
    /// `B`: a one-dimensional, contiguous F32 or F64 tensor that the caller made for this call
    /// and holds no other handle to. Every rank calls with the same lengths in the same order.
    fn all_reduce_sum(&self, flat: &mut dyn Any) -> anyhow::Result<()>;
}

/// Averages every float gradient of `model` over `world_size` ranks through `collective`,
/// in buckets of at most `bucket_cap_bytes`; returns the bytes reduced.
pub(crate) fn average_on_device<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    collective: &dyn DeviceCollective,
    world_size: usize,
    bucket_cap_bytes: usize,
) -> anyhow::Result<usize> {
    let mut take = TakeFlat::<B::InnerBackend> {
        grads,
        taken: Vec::new(),
    };
    model.visit(&mut take);
    let taken = take.taken;
    let (wide, narrow): (Vec<usize>, Vec<usize>) =
        (0..taken.len()).partition(|&i| taken[i].dtype == FloatDType::F64);
    let mut averaged: HashMap<ParamId, Tensor<B::InnerBackend, 1>> = HashMap::new();
    let mut bytes = 0;
    for (indices, wire) in [(narrow, FloatDType::F32), (wide, FloatDType::F64)] {
        let size = DType::from(wire).size();
        let lens: Vec<usize> = taken.iter().map(|g| g.flat.shape()[0]).collect();
        for bucket in buckets(&indices, |i| lens[i] * size, bucket_cap_bytes) {
            let parts = bucket.iter().map(|&i| taken[i].flat.clone().cast(wire));
            let mut sum = Tensor::cat(parts.collect(), 0).into_primitive().tensor();
            collective.all_reduce_sum(&mut sum)?;
            let mean = Tensor::<B::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(sum))
                .div_scalar(world_size as f64);
            bytes += mean.shape()[0] * size;
            let mut offset = 0;
            for &i in &bucket {
                let part = mean.clone().slice(offset..offset + lens[i]);
                offset += lens[i];
                averaged.insert(taken[i].id, part.cast(taken[i].dtype));
            }
        }
    }
    model.visit(&mut PutShaped::<B::InnerBackend> {
        grads: take.grads,
        averaged,
    });
    Ok(bytes)
}

/// A gradient taken out of the container, flattened.
struct Flat<B: Backend> {
    id: ParamId,
    dtype: FloatDType,
    flat: Tensor<B, 1>,
}

/// Removes every float gradient, in visit order, flattened (no copy).
struct TakeFlat<'a, B: Backend> {
    grads: &'a mut GradientsParams,
    taken: Vec<Flat<B>>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for TakeFlat<'_, AB::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if let Some(g) = self.grads.remove::<AB::InnerBackend, D>(param.id) {
            let dtype = g.dtype().into();
            let len = g.shape().num_elements();
            self.taken.push(Flat {
                id: param.id,
                dtype,
                flat: g.reshape([len]),
            });
        }
    }
}

/// Registers the averaged gradients again, in their parameters' shapes.
struct PutShaped<'a, B: Backend> {
    grads: &'a mut GradientsParams,
    averaged: HashMap<ParamId, Tensor<B, 1>>,
}

impl<AB: AutodiffBackend> ModuleVisitor<AB> for PutShaped<'_, AB::InnerBackend> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<AB, D>>) {
        if let Some(flat) = self.averaged.remove(&param.id) {
            let shape: [usize; D] = param
                .val()
                .shape()
                .to_vec()
                .try_into()
                .expect("a parameter of rank D has D dimensions");
            self.grads.register(param.id, flat.reshape(shape));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::TensorData;
    use burn::tensor::backend::BackendTypes;

    use crate::plugins::access::{Gradients, ModelGradients, ParallelGradients};

    type Inner = burn_flex::Flex;
    type B = burn_autodiff::Autodiff<Inner>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        first: Linear<B>,
        second: Linear<B>,
    }

    /// Plays a second rank whose gradients are `0.75 x + 0.125` where this rank's are `x`.
    struct Twin;

    impl DeviceCollective for Twin {
        fn name(&self) -> &str {
            "twin"
        }

        fn all_reduce_sum(&self, flat: &mut dyn Any) -> anyhow::Result<()> {
            let primitive = flat
                .downcast_mut::<<Inner as BackendTypes>::FloatTensorPrimitive>()
                .expect("a Flex tensor");
            let x = Tensor::<Inner, 1>::from_primitive(TensorPrimitive::Float(primitive.clone()));
            let other = x.clone().mul_scalar(0.75).add_scalar(0.125);
            *primitive = (x + other).into_primitive().tensor();
            Ok(())
        }
    }

    /// What the host path makes of `data` with the twin: the sum in the wire type, divided
    /// by 2, in the gradient's own dtype.
    fn host_average(data: &TensorData) -> TensorData {
        let shape = data.shape.clone();
        if data.dtype == DType::F64 {
            let mean: Vec<f64> = data
                .iter::<f64>()
                .map(|x| (x + (x * 0.75 + 0.125)) / 2.0)
                .collect();
            return TensorData::new(mean, shape);
        }
        let wide = data.clone().convert_dtype(DType::F32);
        let mean: Vec<f32> = wide
            .iter::<f32>()
            .map(|x| (x + (x * 0.75 + 0.125)) / 2.0)
            .collect();
        TensorData::new(mean, shape).convert_dtype(data.dtype)
    }

    #[test]
    fn device_average_equals_the_host_paths_bitwise_in_every_dtype_and_bucketing() {
        let device = Default::default();
        let net = Net::<B> {
            first: LinearConfig::new(3, 5).init(&device),
            second: LinearConfig::new(5, 2).init(&device),
        };
        let x = Tensor::<B, 2>::from_data([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], &device);
        let loss = net.second.forward(net.first.forward(x).tanh()).sum();
        let mut grads = GradientsParams::from_grads(loss.backward(), &net);
        let dtypes = [DType::F32, DType::BF16, DType::F64, DType::F16];
        let given: Vec<(ParamId, TensorData)> = {
            let mut view = ModelGradients::<B, _>::new(&net, &mut grads);
            let taken = view.take_host();
            assert_eq!(taken.len(), dtypes.len());
            view.put_host(taken.clone());
            taken
                .into_iter()
                .zip(dtypes)
                .map(|((id, data), dtype)| (id, data.convert_dtype(dtype)))
                .collect()
        };
        // 16 bytes: every gradient in a bucket of its own; 1 MB: one bucket per wire type.
        for cap in [16, 1 << 20] {
            // Taking sets the view's device; the given dtypes go back in their place.
            let mut view = ModelGradients::<B, _>::new(&net, &mut grads);
            let _ = view.take_host();
            view.put_host(given.clone());
            let bytes = view.average_on_device(&Twin, 2, cap).unwrap();
            // first.weight f32 (15), first.bias bf16 (5), second.bias f16 (2) travel in f32;
            // second.weight f64 (10) in f64.
            assert_eq!(bytes, (15 + 5 + 2) * 4 + 10 * 8);
            let averaged = view.take_host();
            for ((id, got), (given_id, data)) in averaged.iter().zip(&given) {
                assert_eq!(id, given_id);
                assert_eq!(got.dtype, data.dtype);
                assert_eq!(got.shape, data.shape);
                assert_eq!(
                    got.as_bytes(),
                    host_average(data).as_bytes(),
                    "{:?} with bucket cap {cap}",
                    data.dtype
                );
            }
            view.put_host(averaged);
        }
    }
}
