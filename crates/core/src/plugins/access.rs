//! What plugins see of a model: its float gradients and weights, without its type.
//!
//! Strategies and precision plugins are chosen by name at run time, so they cannot be generic
//! over the model (or the backend) the way the loop is. The loop hands them these two views
//! instead; each is implemented once, generically, over burn's module visitors, so a plugin
//! reaches exactly the tensors the loop's own code would, in the model's visit order.

use std::collections::HashMap;
use std::marker::PhantomData;

use burn::module::{AutodiffModule, Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, ElementConversion, Tensor, TensorData};

use crate::options::ClipAlgorithm;
use crate::plugins::device_reduce::{self, DeviceCollective};
use crate::trainer::grads;
use crate::trainer::weights::sync_running_states;

/// The gradients of one optimizer step, before the optimizer sees them.
pub trait Gradients {
    /// Removes every float gradient, in the model's visit order, as host data.
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)>;

    /// Puts gradients back on the device (in the dtypes the data carries); ids the model does
    /// not have are ignored.
    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>);

    /// Multiplies every gradient by `factor`, on the device.
    fn scale(&mut self, factor: f64);

    /// The global L2 norm of all gradients (one host read); `None` when there are none. Its
    /// sum of squares is taken in the gradients' dtype, so in f32 it overflows to infinity for
    /// finite gradients above ~1.8e19: ask [`all_finite`](Self::all_finite) whether a step's
    /// gradients are finite.
    fn global_norm(&self) -> Option<f64>;

    /// Whether every gradient holds only finite values (no NaN, no ±Inf), checked element by
    /// element on the device with one host read; true when there are none. The question a
    /// loss scaler asks before it lets the optimizer step.
    fn all_finite(&self) -> bool;

    /// Clips on the device: by global norm or by value, as `gradient_clip_algorithm` says.
    fn clip(&mut self, algorithm: ClipAlgorithm, threshold: f64);

    /// Each gradient's sum of squares (one element, in the gradient's dtype), in visit order
    /// (one host read): the parts a strategy whose ranks hold different gradients gathers to
    /// compute the global norm with [`norm_of_squares`](Self::norm_of_squares).
    fn squares(&self) -> Vec<(ParamId, TensorData)>;

    /// The L2 norm that sums of squares (as [`squares`](Self::squares) gives them, from any
    /// rank, in visit order) make, computed as [`global_norm`](Self::global_norm) computes its
    /// own; `None` when there are none.
    fn norm_of_squares(&self, squares: Vec<TensorData>) -> Option<f64>;

    /// Clips these gradients by the global norm that `squares` make (as
    /// [`clip`](Self::clip) does by their own norm).
    fn clip_to_norm_of(&mut self, squares: Vec<TensorData>, max_norm: f64);

    /// Drops the gradients of the parameters `keep` refuses (the optimizer then leaves those
    /// parameters alone): a sharded strategy keeps only what its rank owns.
    fn retain(&mut self, keep: &mut dyn FnMut(ParamId) -> bool);

    /// Averages every gradient over `world_size` ranks on the device, summing through
    /// `collective` in buckets of at most `bucket_cap_bytes`; returns the bytes reduced.
    fn average_on_device(
        &mut self,
        collective: &dyn DeviceCollective,
        world_size: usize,
        bucket_cap_bytes: usize,
    ) -> anyhow::Result<usize>;

    /// burn's container itself, for a plugin that knows the backend and the ranks.
    fn params(&mut self) -> &mut GradientsParams;
}

/// The model's float weights.
pub trait Weights {
    /// Every float parameter, in visit order, as host data.
    fn to_host(&self) -> Vec<(ParamId, TensorData)>;

    /// The float tensors that take no gradient (batch-norm running statistics, frozen
    /// parameters), in visit order, as host data.
    fn buffers_to_host(&self) -> Vec<(ParamId, TensorData)>;

    /// The float parameters `keep` accepts, in visit order, as host data.
    fn to_host_where(&self, keep: &mut dyn FnMut(ParamId) -> bool) -> Vec<(ParamId, TensorData)>;

    /// The float parameters that take gradients (those an optimizer updates), in visit order;
    /// nothing is copied.
    fn trainable(&self) -> Vec<ParamInfo>;

    /// Replaces the float parameters named in `weights` (same shape; their dtype is kept as
    /// given); others stay. Whether a parameter requires gradients is kept.
    fn load_host(&mut self, weights: Vec<(ParamId, TensorData)>) -> anyhow::Result<()>;
}

/// A borrowed view is a view (a strategy's [`precision_view`] may hand it on unchanged).
///
/// [`precision_view`]: crate::plugins::strategy::Strategy::precision_view
impl<G: Gradients + ?Sized> Gradients for &mut G {
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)> {
        (**self).take_host()
    }
    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>) {
        (**self).put_host(grads);
    }
    fn scale(&mut self, factor: f64) {
        (**self).scale(factor);
    }
    fn global_norm(&self) -> Option<f64> {
        (**self).global_norm()
    }
    fn all_finite(&self) -> bool {
        (**self).all_finite()
    }
    fn clip(&mut self, algorithm: ClipAlgorithm, threshold: f64) {
        (**self).clip(algorithm, threshold);
    }
    fn squares(&self) -> Vec<(ParamId, TensorData)> {
        (**self).squares()
    }
    fn norm_of_squares(&self, squares: Vec<TensorData>) -> Option<f64> {
        (**self).norm_of_squares(squares)
    }
    fn clip_to_norm_of(&mut self, squares: Vec<TensorData>, max_norm: f64) {
        (**self).clip_to_norm_of(squares, max_norm);
    }
    fn retain(&mut self, keep: &mut dyn FnMut(ParamId) -> bool) {
        (**self).retain(keep);
    }
    fn average_on_device(
        &mut self,
        collective: &dyn DeviceCollective,
        world_size: usize,
        bucket_cap_bytes: usize,
    ) -> anyhow::Result<usize> {
        (**self).average_on_device(collective, world_size, bucket_cap_bytes)
    }
    fn params(&mut self) -> &mut GradientsParams {
        (**self).params()
    }
}

/// [`Gradients`] of model `M` over burn's container.
pub(crate) struct ModelGradients<'a, B: AutodiffBackend, M> {
    pub(crate) model: &'a M,
    pub(crate) grads: &'a mut GradientsParams,
    device: Option<burn::tensor::Device<B::InnerBackend>>,
}

impl<'a, B: AutodiffBackend, M: AutodiffModule<B>> ModelGradients<'a, B, M> {
    pub(crate) fn new(model: &'a M, grads: &'a mut GradientsParams) -> Self {
        Self {
            model,
            grads,
            device: None,
        }
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> ModelGradients<'_, B, M> {
    /// The norm of `squares` on the model's device.
    fn norm_on_device(&self, squares: Vec<TensorData>) -> Option<Tensor<B::InnerBackend, 1>> {
        let mut first = FirstDevice::<B>(None);
        self.model.visit(&mut first);
        let device = first.0?;
        grads::norm_of_squares(squares.into_iter().map(|square| {
            let dtype = square.dtype;
            Tensor::<B::InnerBackend, 1>::from_data(square, (&device, dtype))
        }))
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Gradients for ModelGradients<'_, B, M> {
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)> {
        let mut take = TakeGrads::<B> {
            grads: self.grads,
            taken: Vec::new(),
            device: None,
        };
        self.model.visit(&mut take);
        if let Some(device) = take.device {
            self.device = Some(device);
        }
        take.taken
    }

    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>) {
        let Some(device) = self.device.clone() else {
            return;
        };
        self.model.visit(&mut PutGrads::<B> {
            grads: self.grads,
            data: grads.into_iter().collect(),
            device,
        });
    }

    fn scale(&mut self, factor: f64) {
        grads::scale::<B, M>(self.model, self.grads, factor);
    }

    fn global_norm(&self) -> Option<f64> {
        grads::global_norm::<B, M>(self.model, self.grads).map(|n| n.into_scalar().elem())
    }

    fn all_finite(&self) -> bool {
        grads::all_finite::<B, M>(self.model, self.grads)
    }

    fn clip(&mut self, algorithm: ClipAlgorithm, threshold: f64) {
        grads::clip::<B, M>(self.model, self.grads, algorithm, threshold);
    }

    fn squares(&self) -> Vec<(ParamId, TensorData)> {
        grads::squares::<B, M>(self.model, self.grads)
            .into_iter()
            .map(|(id, square)| (id, square.into_data()))
            .collect()
    }

    fn norm_of_squares(&self, squares: Vec<TensorData>) -> Option<f64> {
        self.norm_on_device(squares)
            .map(|norm| norm.into_scalar().elem())
    }

    fn clip_to_norm_of(&mut self, squares: Vec<TensorData>, max_norm: f64) {
        if let Some(norm) = self.norm_on_device(squares) {
            grads::clip_to_norm::<B, M>(self.model, self.grads, norm, max_norm);
        }
    }

    fn retain(&mut self, keep: &mut dyn FnMut(ParamId) -> bool) {
        self.model.visit(&mut RetainGrads::<B> {
            grads: self.grads,
            keep,
            _backend: PhantomData,
        });
    }

    fn average_on_device(
        &mut self,
        collective: &dyn DeviceCollective,
        world_size: usize,
        bucket_cap_bytes: usize,
    ) -> anyhow::Result<usize> {
        device_reduce::average_on_device::<B, M>(
            self.model,
            self.grads,
            collective,
            world_size,
            bucket_cap_bytes,
        )
    }

    fn params(&mut self) -> &mut GradientsParams {
        self.grads
    }
}

/// [`Weights`] of model `M`, which it replaces when weights are loaded.
pub(crate) struct ModelWeights<'a, B, M> {
    model: &'a mut M,
    _backend: PhantomData<B>,
}

impl<'a, B: Backend, M: Module<B>> ModelWeights<'a, B, M> {
    pub(crate) fn new(model: &'a mut M) -> Self {
        Self {
            model,
            _backend: PhantomData,
        }
    }
}

impl<B: Backend, M: Module<B>> Weights for ModelWeights<'_, B, M> {
    fn to_host(&self) -> Vec<(ParamId, TensorData)> {
        host_weights::<B, M>(self.model)
    }

    fn buffers_to_host(&self) -> Vec<(ParamId, TensorData)> {
        sync_running_states::<B, M>(self.model);
        let mut gather = GatherWeights {
            weights: Vec::new(),
            keep: &mut |_, takes_grad| !takes_grad,
        };
        self.model.visit(&mut gather);
        gather.weights
    }

    fn to_host_where(&self, keep: &mut dyn FnMut(ParamId) -> bool) -> Vec<(ParamId, TensorData)> {
        sync_running_states::<B, M>(self.model);
        let mut gather = GatherWeights {
            weights: Vec::new(),
            keep: &mut |id, _| keep(id),
        };
        self.model.visit(&mut gather);
        gather.weights
    }

    fn trainable(&self) -> Vec<ParamInfo> {
        let mut sizes = TrainableSizes(Vec::new());
        self.model.visit(&mut sizes);
        sizes.0
    }

    fn load_host(&mut self, weights: Vec<(ParamId, TensorData)>) -> anyhow::Result<()> {
        // A pending running-state update would overwrite what is loaded at the next step.
        sync_running_states::<B, M>(self.model);
        let mut load = LoadWeights {
            data: weights.into_iter().collect(),
            error: None,
        };
        *self.model = self.model.clone().map(&mut load);
        match load.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Every float parameter of `model`, in visit order, as host data.
pub(crate) fn host_weights<B: Backend, M: Module<B>>(model: &M) -> Vec<(ParamId, TensorData)> {
    sync_running_states::<B, M>(model);
    let mut gather = GatherWeights {
        weights: Vec::new(),
        keep: &mut |_, _| true,
    };
    model.visit(&mut gather);
    gather.weights
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

/// Registers host gradients again.
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

/// The device of a model's first float parameter.
struct FirstDevice<B: AutodiffBackend>(Option<burn::tensor::Device<B::InnerBackend>>);

impl<B: AutodiffBackend> ModuleVisitor<B> for FirstDevice<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.0.is_none() {
            self.0 = Some(param.val().device());
        }
    }
}

/// Drops the gradients a predicate refuses.
struct RetainGrads<'a, B> {
    grads: &'a mut GradientsParams,
    keep: &'a mut dyn FnMut(ParamId) -> bool,
    _backend: PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for RetainGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !(self.keep)(param.id) {
            self.grads.remove::<B::InnerBackend, D>(param.id);
        }
    }
}

/// The float parameters `keep` accepts (given the id and whether the parameter takes
/// gradients) as host data, in visit order.
struct GatherWeights<'a> {
    weights: Vec<(ParamId, TensorData)>,
    keep: &'a mut dyn FnMut(ParamId, bool) -> bool,
}

impl<B: Backend> ModuleVisitor<B> for GatherWeights<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if (self.keep)(param.id, value.is_require_grad()) {
            self.weights.push((param.id, value.into_data()));
        }
    }
}

/// A float parameter's id, shape and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    /// burn's id of the parameter.
    pub id: ParamId,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
}

impl ParamInfo {
    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }
}

/// The float parameters that take gradients, in visit order.
struct TrainableSizes(Vec<ParamInfo>);

impl<B: Backend> ModuleVisitor<B> for TrainableSizes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let value = param.val();
        if value.is_require_grad() {
            self.0.push(ParamInfo {
                id: param.id,
                shape: value.shape().to_vec(),
                dtype: value.dtype(),
            });
        }
    }
}

/// Replaces float parameters by id with host data.
struct LoadWeights {
    data: HashMap<ParamId, TensorData>,
    error: Option<anyhow::Error>,
}

impl<B: Backend> ModuleMapper<B> for LoadWeights {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(data) = self.data.remove(&param.id) else {
            return param;
        };
        let id = param.id;
        param.map(|t| {
            if data.shape != t.shape() && self.error.is_none() {
                self.error = Some(anyhow::anyhow!(
                    "weights for parameter {id} have shape {:?}, the model's has {:?}",
                    data.shape,
                    t.shape()
                ));
                return t;
            }
            let (dtype, device, require_grad) = (data.dtype, t.device(), t.is_require_grad());
            Tensor::from_data(data, (&device, dtype)).set_require_grad(require_grad)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};

    type B = burn_autodiff::Autodiff<burn_flex::Flex>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        linear: Linear<B>,
        norm: BatchNorm<B>,
    }

    #[test]
    fn buffers_are_the_tensors_without_gradients() {
        let device = Default::default();
        let mut net = Net::<B> {
            linear: LinearConfig::new(3, 2).init(&device),
            norm: BatchNormConfig::new(2).init(&device),
        };
        let weights = ModelWeights::<B, _>::new(&mut net);
        // linear weight + bias, gamma + beta, running mean + var.
        assert_eq!(weights.to_host().len(), 6);
        let buffers = weights.buffers_to_host();
        let values: Vec<Vec<f32>> = buffers
            .iter()
            .map(|(_, d)| d.to_vec::<f32>().unwrap())
            .collect();
        assert_eq!(
            values,
            [vec![0.0, 0.0], vec![1.0, 1.0]],
            "running mean, var"
        );
        // A training forward leaves its update pending in burn; the views see it anyway.
        let x = Tensor::<B, 2>::from_data([[1.0, 2.0], [3.0, 4.0]], &device);
        let _ = net.norm.forward(x);
        let weights = ModelWeights::<B, _>::new(&mut net);
        let mean = weights.buffers_to_host()[0].1.to_vec::<f32>().unwrap();
        assert_eq!(mean, [0.2, 0.3], "momentum 0.1 of the batch mean [2, 3]");
    }
}
