//! Activation checkpointing of chosen blocks: [`recompute`] runs a block so that, while
//! checkpointing is on ([`Recomputing`]; the Trainer turns it on with
//! `--trainer.activation_checkpointing`), the backward pass keeps only the block's input and
//! runs the block again to get what its gradients need, instead of keeping every activation
//! inside it from the forward pass.
//!
//! How: the forward runs the block on detached parameters (nothing recorded) and leaves one
//! node in the autodiff graph holding the input. When the backward pass reaches that node, it
//! runs the block again with its parameters tracked, from the same random state (so dropout
//! draws the same masks), takes that small graph's backward from the incoming gradient, and
//! hands the input's and the parameters' gradients to the outer pass. At any moment the
//! activations kept are those outside checkpointed blocks, every checkpointed block's input,
//! and one block's inside.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use burn::module::{ModuleVisitor, Param};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Distribution, TensorPrimitive};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::NoCheckpointing;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};

/// Runs `forward(block, x)`; while activation checkpointing is on for `B`, the block's
/// activations are recomputed in the backward pass instead of kept (see the module docs).
/// Results and gradients are those of `forward(block, x)` run from a seed the call draws from
/// the backend's generator: bitwise the same for a block without randomness, other dropout
/// masks for one with it.
///
/// `forward` may use `x`, `block` and tensors that need no gradient (masks, constants); a
/// float tensor from the rest of the model that needs a gradient must not be captured (pass it
/// through `x`, or into `block`), and `block`'s parameters must not be used outside it (calls
/// may share a block).
pub fn recompute<B, M, F, const D: usize>(block: &M, x: Tensor<B, D>, forward: F) -> Tensor<B, D>
where
    B: Backend,
    M: Module<B> + Sync + 'static,
    F: Fn(&M, Tensor<B, D>) -> Tensor<B, D> + Send + Sync + 'static,
{
    let Some(run) = runner::<B>() else {
        return forward(block, x);
    };
    RECOMPUTED.with(|count| count.set(count.get() + 1));
    // burn initialises a parameter when first read, each clone on its own: read them here, so
    // the copy kept for the backward pass has the model's own (the ones gradients go to).
    block.visit(&mut Initialise);
    let block = Arc::new(Typed::<M, F, D> {
        block: block.clone(),
        forward,
    });
    Tensor::from_primitive(TensorPrimitive::Float(run(
        x.into_primitive().tensor(),
        block,
    )))
}

/// Reads every float parameter of a module.
struct Initialise;

impl<B: Backend> ModuleVisitor<B> for Initialise {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        param.val();
    }
}

/// Activation checkpointing turned on for backend `B` on this thread until dropped: while it
/// lives, [`recompute`] on `B` recomputes. The Trainer holds one through a fit run with
/// `--trainer.activation_checkpointing`; a hand-written loop may hold its own.
pub struct Recomputing {
    backend: TypeId,
    previous: Option<Box<dyn Any>>,
    /// [`RECOMPUTED`] when it was turned on.
    recomputed_before: u64,
}

impl Recomputing {
    /// Turns activation checkpointing on for `B` on this thread.
    pub fn on<B: AutodiffBackend>() -> Self {
        let backend = TypeId::of::<B>();
        let run: Runner<B> = run::<B>;
        let previous = RUNNERS.with(|runners| runners.borrow_mut().insert(backend, Box::new(run)));
        let recomputed_before = RECOMPUTED.with(Cell::get);
        Self {
            backend,
            previous,
            recomputed_before,
        }
    }

    /// Blocks [`recompute`] has set up for recomputation on this thread since this was turned
    /// on: 0 after training says the model marks none, and the flag changed nothing.
    pub fn blocks_recomputed(&self) -> u64 {
        RECOMPUTED.with(Cell::get) - self.recomputed_before
    }
}

impl Drop for Recomputing {
    fn drop(&mut self) {
        RUNNERS.with(|runners| {
            let mut runners = runners.borrow_mut();
            match self.previous.take() {
                Some(previous) => runners.insert(self.backend, previous),
                None => runners.remove(&self.backend),
            }
        });
    }
}

/// How a backend with checkpointing on runs a block.
type Runner<B> = fn(FloatTensor<B>, Arc<dyn Block<B>>) -> FloatTensor<B>;

thread_local! {
    /// Each backend's [`Runner`] while checkpointing is on for it, by the backend's type.
    static RUNNERS: RefCell<HashMap<TypeId, Box<dyn Any>>> = RefCell::new(HashMap::new());
    /// Calls of [`recompute`] that found checkpointing on, on this thread.
    static RECOMPUTED: Cell<u64> = const { Cell::new(0) };
}

fn runner<B: Backend>() -> Option<Runner<B>> {
    RUNNERS.with(|runners| {
        let runners = runners.borrow();
        runners
            .get(&TypeId::of::<B>())?
            .downcast_ref::<Runner<B>>()
            .copied()
    })
}

/// A block with its forward, its tensor types erased so the backward node can hold it.
trait Block<B: Backend>: Send + Sync {
    /// The block's output for `x`, with its parameters tracked or detached.
    fn forward(&self, x: FloatTensor<B>, tracked: bool) -> FloatTensor<B>;
    /// The block's float parameters.
    fn parameters(&self) -> Vec<FloatTensor<B>>;
}

/// A block and its forward over `D`-dimensional tensors.
struct Typed<M, F, const D: usize> {
    block: M,
    forward: F,
}

impl<B, M, F, const D: usize> Block<B> for Typed<M, F, D>
where
    B: Backend,
    M: Module<B> + Sync,
    F: Fn(&M, Tensor<B, D>) -> Tensor<B, D> + Send + Sync,
{
    fn forward(&self, x: FloatTensor<B>, tracked: bool) -> FloatTensor<B> {
        let x = Tensor::from_primitive(TensorPrimitive::Float(x));
        let y = match tracked {
            true => (self.forward)(&self.block, x),
            false => (self.forward)(&self.block.clone().no_grad(), x),
        };
        y.into_primitive().tensor()
    }

    fn parameters(&self) -> Vec<FloatTensor<B>> {
        struct Collect<B: Backend>(Vec<FloatTensor<B>>);
        impl<B: Backend> ModuleVisitor<B> for Collect<B> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                self.0.push(param.val().into_primitive().tensor());
            }
        }
        let mut collect = Collect(Vec::new());
        self.block.visit(&mut collect);
        collect.0
    }
}

/// burn's autodiff tensor over `I` (its type is only reachable through the backend).
type AutodiffTensor<I> = FloatTensor<Autodiff<I>>;

/// `value` as `T` when it is one (the same type behind two names), else back as it was; moved,
/// not boxed.
fn cast<S: 'static, T: 'static>(value: S) -> Result<T, S> {
    let mut slot = Some(value);
    if let Some(same) = (&mut slot as &mut dyn Any).downcast_mut::<Option<T>>() {
        return Ok(same.take().expect("filled above"));
    }
    Err(slot.take().expect("filled above"))
}

/// The runner of an autodiff backend: see the module docs.
fn run<B: AutodiffBackend>(x: FloatTensor<B>, block: Arc<dyn Block<B>>) -> FloatTensor<B> {
    let device = B::float_device(&x);
    let x = match cast::<_, AutodiffTensor<B::InnerBackend>>(x) {
        Ok(x) => x,
        // Not burn's autodiff: nothing to hook into, so the block runs as it is.
        Err(x) => return block.forward(x, true),
    };
    let seed = fresh_seed::<B>(&device);
    // A leaf that needs no gradient gets one, so that the parameters' gradients still flow.
    let x = match x.is_tracked() {
        true => x,
        false => x.require_grad(),
    };
    let input = x.primitive.clone();
    B::seed(&device, seed);
    let detached = as_backend::<B>(AutodiffTensor::new(input.clone()));
    let output = as_autodiff::<B>(block.forward(detached, false)).primitive;
    let saved = Saved {
        input,
        block,
        seed,
        device,
    };
    let output = match RecomputeBlock::<B>::default()
        .prepare::<NoCheckpointing>([x.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(saved, output),
        OpsKind::UnTracked(prep) => prep.finish(output),
    };
    as_backend::<B>(output)
}

/// A seed for the block's random draws, from the backend's generator.
fn fresh_seed<B: Backend>(device: &B::Device) -> u64 {
    let draw = Tensor::<B, 1, Int>::random([1], Distribution::Uniform(0.0, 2e9), device);
    draw.into_scalar().elem::<i64>() as u64
}

fn as_backend<B: AutodiffBackend>(x: AutodiffTensor<B::InnerBackend>) -> FloatTensor<B> {
    cast(x).unwrap_or_else(|_| unreachable!("checked when the block started"))
}

fn as_autodiff<B: AutodiffBackend>(x: FloatTensor<B>) -> AutodiffTensor<B::InnerBackend> {
    cast(x).unwrap_or_else(|_| unreachable!("checked when the block started"))
}

/// What the backward node keeps: the block's input and how to run it again.
#[derive(Clone)]
struct Saved<B: AutodiffBackend> {
    input: FloatTensor<B::InnerBackend>,
    block: Arc<dyn Block<B>>,
    seed: u64,
    device: B::Device,
}

impl<B: AutodiffBackend> fmt::Debug for Saved<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saved").field("seed", &self.seed).finish()
    }
}

/// The backward node of a checkpointed block.
struct RecomputeBlock<B>(std::marker::PhantomData<fn() -> B>);

impl<B> Default for RecomputeBlock<B> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<B> fmt::Debug for RecomputeBlock<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecomputeBlock")
    }
}

impl<B: AutodiffBackend> Backward<B::InnerBackend, 1> for RecomputeBlock<B> {
    type State = Saved<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let incoming = grads.consume::<B::InnerBackend>(&ops.node);
        let Saved {
            input,
            block,
            seed,
            device,
        } = ops.state;
        B::seed(&device, seed);
        let x = AutodiffTensor::<B::InnerBackend>::new(input).require_grad();
        let output = block.forward(as_backend::<B>(x.clone()), true);
        // The small graph's backward from the incoming gradient: d(Σ output ⊙ incoming).
        let root = B::float_sum(B::float_mul(output, B::from_inner(incoming)));
        let inner: Box<dyn Any> = Box::new(B::backward(root));
        let mut inner = inner
            .downcast::<Gradients>()
            .expect("burn's autodiff gives burn's gradients");
        if let [Some(parent)] = &ops.parents
            && let Some(grad) = inner.remove::<B::InnerBackend>(&x)
        {
            grads.register::<B::InnerBackend>(parent.id, grad);
        }
        for parameter in block.parameters() {
            let parameter = as_autodiff::<B>(parameter);
            if let Some(grad) = inner.remove::<B::InnerBackend>(&parameter) {
                grads.register::<B::InnerBackend>(parameter.node.id, grad);
            }
        }
    }
}

#[cfg(test)]
mod tests;
