//! The dtype side of a precision: which float type tensors on the device are created in, and
//! for the mixed precisions which type the master weights stay in.
//!
//! burn 0.21 keeps a default float dtype per device (set once, before the first tensor on it);
//! `Tensor::from_data` and every module initialiser create floats in it, and burn-flex runs
//! F64, F16 and BF16 kernels at run time. A "true" precision is therefore one backend type
//! plus the device's default dtype, set when the Trainer is made and before the model is.
//!
//! A mixed precision sets the device's default to the low-precision type, so batches arrive in
//! it, and keeps the weights the optimizer updates in f32 ([`master`]). Each step computes with
//! a copy cast to the low type ([`compute`]); burn-autodiff's cast casts the gradient back, so
//! the gradients reaching the optimizer are f32.

use anyhow::bail;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::{AutodiffBackend, Backend, set_default_float_dtype};
use burn::tensor::{FloatDType, Tensor, get_device_settings};

use ember_plan::precision::Precision;

/// The float type a precision computes in (the device's default float type).
pub fn compute_dtype(precision: Precision) -> FloatDType {
    match precision {
        Precision::F32True => FloatDType::F32,
        Precision::F64True => FloatDType::F64,
        Precision::F16True | Precision::F16Mixed => FloatDType::F16,
        Precision::Bf16True | Precision::Bf16Mixed => FloatDType::BF16,
    }
}

/// The low-precision type of a mixed precision; `None` for the true ones.
pub fn mixed_dtype(precision: Precision) -> Option<FloatDType> {
    match precision {
        Precision::F16Mixed | Precision::Bf16Mixed => Some(compute_dtype(precision)),
        _ => None,
    }
}

/// Makes `precision`'s compute type the default float type of `device`. It fails when the
/// backend lacks the type, or when tensors already exist on the device in another type (a
/// process trains in one float type per device).
pub fn apply<B: Backend>(device: &B::Device, precision: Precision) -> anyhow::Result<()> {
    let dtype = compute_dtype(precision);
    match set_default_float_dtype::<B>(device, dtype) {
        Ok(()) => Ok(()),
        Err(error) => {
            let current = get_device_settings::<B>(device).float_dtype;
            if current == dtype {
                return Ok(());
            }
            bail!(
                "precision {precision} needs {dtype:?} tensors, but the device already holds {current:?} ones ({error}); \
                 a process trains in one float type per device, so build the Trainer before any tensor"
            )
        }
    }
}

/// Casts every float parameter of a module to a dtype, recording the cast under autodiff.
struct Cast(FloatDType);

impl<B: Backend> ModuleMapper<B> for Cast {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|t| t.cast(self.0))
    }
}

/// Replaces every float parameter with an f32 copy that is a new leaf of the graph.
struct F32Leaves;

impl<B: AutodiffBackend> ModuleMapper<B> for F32Leaves {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        param.map(|t| {
            let require_grad = t.is_require_grad();
            Tensor::from_inner(t.inner().cast(FloatDType::F32)).set_require_grad(require_grad)
        })
    }
}

/// The model with f32 leaf parameters: the weights the optimizer updates under a mixed precision.
pub fn master<B: AutodiffBackend, M: Module<B>>(model: M) -> M {
    model.map(&mut F32Leaves)
}

/// A copy of `model` cast to `dtype`; under autodiff the casts are recorded, so a loss
/// computed with it sends f32 gradients to `model`'s parameters.
pub fn compute<B: Backend, M: Module<B>>(model: M, dtype: FloatDType) -> M {
    model.map(&mut Cast(dtype))
}

/// Casts each float parameter to the type `dtype_of` gives for its module path (one path
/// buffer reused for every parameter: this runs on every step).
struct CastByPath<'a> {
    dtype_of: &'a dyn Fn(&str) -> Option<FloatDType>,
    path: String,
    /// Length of `path` before each module entered.
    marks: Vec<usize>,
}

impl<B: Backend> ModuleMapper<B> for CastByPath<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.marks.push(self.path.len());
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(name);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        let mark = self.marks.pop().unwrap_or(0);
        self.path.truncate(mark);
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        match (self.dtype_of)(&self.path) {
            Some(dtype) => param.map(|t| t.cast(dtype)),
            None => param,
        }
    }
}

/// A copy of `model` cast parameter by parameter as `dtype_of` says for each module path
/// (`None`: keep the parameter as it is); under autodiff the casts are recorded, so the
/// gradients reach the f32 masters in f32.
pub fn compute_by_path<B: Backend, M: Module<B>>(
    model: M,
    dtype_of: &dyn Fn(&str) -> Option<FloatDType>,
) -> M {
    model.map(&mut CastByPath {
        dtype_of,
        path: String::new(),
        marks: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::GradientsParams;
    use burn::tensor::{DType, Tensor};
    use burn_autodiff::Autodiff;
    use burn_flex::{Flex, FlexDevice};

    type B = Autodiff<Flex>;

    fn dtypes(layer: &Linear<B>) -> [DType; 2] {
        let bias = layer.bias.as_ref().expect("a bias");
        [layer.weight.val().dtype(), bias.val().dtype()]
    }

    /// Mixed precision's mechanism: the master copy is f32, the compute copy bf16, and a loss
    /// computed with the compute copy sends f32 gradients to the master's parameters.
    #[test]
    fn a_loss_of_the_compute_copy_gives_the_f32_masters_f32_gradients() {
        let device = FlexDevice;
        let master = master(LinearConfig::new(4, 2).init::<B>(&device));
        assert_eq!(dtypes(&master), [DType::F32; 2]);
        let low = compute(master.clone(), FloatDType::BF16);
        assert_eq!(dtypes(&low), [DType::BF16; 2]);
        let x = Tensor::<B, 2>::ones([3, 4], &device).cast(FloatDType::BF16);
        let loss = low.forward(x).sum();
        assert_eq!(loss.dtype(), DType::BF16);
        let grads = GradientsParams::from_grads(loss.backward(), &master);
        let g = grads
            .get::<Flex, 2>(master.weight.id)
            .expect("the master weight has a gradient");
        assert_eq!(g.dtype(), DType::F32);
    }
}
