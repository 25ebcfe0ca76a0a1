//! What plugins see of a model: its float gradients (here) and weights
//! ([`weights`](crate::plugins::weights)), without its type.
//!
//! Strategies and precision plugins are chosen by name at run time, so they cannot be generic
//! over the model (or the backend) the way the loop is. The loop hands them these two views
//! instead; each is implemented once, generically, over burn's module visitors, so a plugin
//! reaches exactly the tensors the loop's own code would, in the model's visit order.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor, TensorData};

use crate::options::ClipAlgorithm;
use crate::plugins::device_reduce::{self, DeviceCollective};
use crate::plugins::grads;

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

    /// burn's container itself, for a plugin that knows the backend and the ranks.
    fn params(&mut self) -> &mut GradientsParams;

    /// What data-parallel strategies need besides ([`ParallelGradients`]); `None` (the
    /// default) for a view that offers none, which `ddp` on a device collective and
    /// `ddp_sharded` then refuse with an error. The Trainer's own gradients offer it.
    fn parallel(&self) -> Option<&dyn ParallelGradients> {
        None
    }

    /// [`parallel`](Self::parallel), to change the gradients.
    fn parallel_mut(&mut self) -> Option<&mut dyn ParallelGradients> {
        None
    }
}

/// The parts of a step's gradients that the built-in data-parallel strategies work with:
/// per-parameter sums of squares for a norm over ranks that hold different gradients, and the
/// average over ranks on the device. A view wrapping the Trainer's gradients hands these on.
pub trait ParallelGradients: Gradients {
    /// Each gradient's sum of squares (one element, in the gradient's dtype), in visit order
    /// (one host read): the parts a strategy whose ranks hold different gradients gathers to
    /// compute the global norm with [`norm_of_squares`](Self::norm_of_squares).
    fn squares(&self) -> Vec<(ParamId, TensorData)>;

    /// The L2 norm that sums of squares (as [`squares`](Self::squares) gives them, from any
    /// rank, in visit order) make, computed as [`Gradients::global_norm`] computes its
    /// own; `None` when there are none.
    fn norm_of_squares(&self, squares: Vec<TensorData>) -> Option<f64>;

    /// Clips these gradients by the global norm that `squares` make (as
    /// [`Gradients::clip`] does by their own norm).
    fn clip_to_norm_of(&mut self, squares: Vec<TensorData>, max_norm: f64);

    /// Averages every gradient over `world_size` ranks on the device, summing through
    /// `collective` in buckets of at most `bucket_cap_bytes`; returns the bytes reduced.
    fn average_on_device(
        &mut self,
        collective: &dyn DeviceCollective,
        world_size: usize,
        bucket_cap_bytes: usize,
    ) -> anyhow::Result<usize>;
}

/// The error of a strategy given gradients without [`ParallelGradients`].
pub(crate) fn not_parallel() -> anyhow::Error {
    anyhow::anyhow!(
        "these gradients offer no ParallelGradients (Gradients::parallel returned None): a data-parallel strategy cannot reduce them"
    )
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
    fn params(&mut self) -> &mut GradientsParams {
        (**self).params()
    }
    fn parallel(&self) -> Option<&dyn ParallelGradients> {
        (**self).parallel()
    }
    fn parallel_mut(&mut self) -> Option<&mut dyn ParallelGradients> {
        (**self).parallel_mut()
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

    fn params(&mut self) -> &mut GradientsParams {
        self.grads
    }

    fn parallel(&self) -> Option<&dyn ParallelGradients> {
        Some(self)
    }

    fn parallel_mut(&mut self) -> Option<&mut dyn ParallelGradients> {
        Some(self)
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> ParallelGradients for ModelGradients<'_, B, M> {
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
