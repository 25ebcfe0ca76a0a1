//! What plugins see of a model's weights, without its type: the [`Weights`] view (its
//! gradients' view is [`access`](crate::plugins::access)), implemented once over burn's module
//! visitors, in the model's visit order.

use std::collections::HashMap;
use std::marker::PhantomData;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

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

/// Brings burn's `RunningState`s (batch-norm statistics) up to date. A training step leaves
/// its update pending until the next step reads it, so a visitor would see the value from
/// one step before; recording the module syncs them, and a module's clones share its running
/// states, so recording a clone syncs the model's own.
pub(crate) fn sync_running_states<B: Backend, M: Module<B>>(model: &M) {
    let _ = model.clone().into_record();
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
