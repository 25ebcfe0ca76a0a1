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
use std::cell::RefCell;
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
/// Results and gradients are those of `forward(block, x)`.
///
/// `forward` may use `x`, `block` and tensors that need no gradient (masks, constants); a
/// float tensor from the rest of the model that needs a gradient must not be captured (pass it
/// through `x`, or into `block`), and `block`'s parameters must not be used outside it.
pub fn recompute<B, M, F, const D: usize>(block: &M, x: Tensor<B, D>, forward: F) -> Tensor<B, D>
where
    B: Backend,
    M: Module<B> + Sync + 'static,
    F: Fn(&M, Tensor<B, D>) -> Tensor<B, D> + Send + Sync + 'static,
{
    let Some(run) = runner::<B>() else {
        return forward(block, x);
    };
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
}

impl Recomputing {
    /// Turns activation checkpointing on for `B` on this thread.
    pub fn on<B: AutodiffBackend>() -> Self {
        let backend = TypeId::of::<B>();
        let run: Runner<B> = run::<B>;
        let previous = RUNNERS.with(|runners| runners.borrow_mut().insert(backend, Box::new(run)));
        Self { backend, previous }
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

/// `value` as `T` when it is one (the same type behind two names), else back as it was.
fn cast<S: 'static, T: 'static>(value: S) -> Result<T, S> {
    let boxed: Box<dyn Any> = Box::new(value);
    match boxed.downcast::<T>() {
        Ok(value) => Ok(*value),
        Err(boxed) => Err(*boxed.downcast::<S>().expect("the value's own type")),
    }
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
mod tests {
    use burn::nn::{Dropout, DropoutConfig, Gelu, Linear, LinearConfig};
    use burn::optim::GradientsParams;
    use burn_flex::Flex;

    use super::*;

    type B = Autodiff<Flex>;

    /// burn-flex's generator is one for the process: tests that draw from it take turns.
    static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn generator() -> std::sync::MutexGuard<'static, ()> {
        GENERATOR
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[derive(Module, Debug)]
    struct Mlp<B: Backend> {
        expand: Linear<B>,
        contract: Linear<B>,
        dropout: Dropout,
    }

    impl<B: Backend> Mlp<B> {
        fn new(dropout: f64, device: &B::Device) -> Self {
            Self {
                expand: LinearConfig::new(8, 32).init(device),
                contract: LinearConfig::new(32, 8).init(device),
                dropout: DropoutConfig::new(dropout).init(),
            }
        }

        fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
            let hidden = Gelu::new().forward(self.expand.forward(x.clone()));
            x + self.dropout.forward(self.contract.forward(hidden))
        }
    }

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        input: Linear<B>,
        blocks: Vec<Mlp<B>>,
    }

    impl<B: Backend> Net<B> {
        fn new(dropout: f64, device: &B::Device) -> Self {
            B::seed(device, 3);
            let net = Self {
                input: LinearConfig::new(8, 8).init(device),
                blocks: (0..3).map(|_| Mlp::new(dropout, device)).collect(),
            };
            // burn initialises parameters when first read: now, not between the draws compared.
            net.visit(&mut Initialise);
            net
        }

        /// The loss, each block through [`recompute`] or not, and the seed each block's
        /// dropout draws from when `reseed` (as `recompute` does).
        fn loss(&self, x: Tensor<B, 3>, checkpointed: bool, reseed: bool) -> Tensor<B, 1> {
            let device = x.device();
            let x = self.blocks.iter().fold(self.input.forward(x), |x, block| {
                if checkpointed {
                    return recompute(block, x, |block, x| block.forward(x));
                }
                if reseed {
                    B::seed(&device, fresh_seed::<B>(&device));
                }
                block.forward(x)
            });
            x.powi_scalar(2).mean()
        }
    }

    fn gradients(net: &Net<B>, checkpointed: bool, reseed: bool) -> (f32, Vec<Vec<f32>>) {
        let device = Default::default();
        B::seed(&device, 11);
        let x = Tensor::<B, 3>::random([4, 5, 8], Distribution::Default, &device);
        let loss = net.loss(x, checkpointed, reseed);
        let value = loss.clone().into_scalar();
        let grads = GradientsParams::from_grads(loss.backward(), net);
        let mut all = Vec::new();
        struct Grads<'a>(&'a GradientsParams, &'a mut Vec<Vec<f32>>);
        impl<B: AutodiffBackend> ModuleVisitor<B> for Grads<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let grad = self
                    .0
                    .get::<B::InnerBackend, D>(param.id)
                    .expect("a gradient");
                self.1.push(grad.into_data().to_vec().unwrap());
            }
        }
        net.visit(&mut Grads(&grads, &mut all));
        (value, all)
    }

    #[test]
    fn without_checkpointing_on_it_runs_the_block_as_it_is() {
        let _generator = generator();
        let net = Net::<B>::new(0.3, &Default::default());
        assert_eq!(gradients(&net, true, false), gradients(&net, false, false));
    }

    /// The loss and gradients with every block recomputed against those of the plain graph
    /// (its blocks drawing from the seeds `recompute` draws when `reseed`): the same bits.
    fn recomputing_keeps_the_bits(dropout: f64, reseed: bool) {
        let _generator = generator();
        let net = Net::<B>::new(dropout, &Default::default());
        let plain = gradients(&net, false, reseed);
        let _on = Recomputing::on::<B>();
        assert!(gradients(&net, true, false) == plain);
    }

    #[test]
    fn recomputed_blocks_give_the_same_loss_and_gradients() {
        recomputing_keeps_the_bits(0.0, false);
    }

    #[test]
    fn dropout_draws_the_same_masks_when_the_block_runs_again() {
        recomputing_keeps_the_bits(0.3, true);
    }

    #[test]
    fn an_input_that_needs_no_gradient_still_trains_the_block() {
        let _generator = generator();
        let device = Default::default();
        let block = Mlp::<B>::new(0.0, &device);
        let x = Tensor::<B, 3>::random([2, 3, 8], Distribution::Default, &device);
        let _on = Recomputing::on::<B>();
        let loss = recompute(&block, x, |block, x| block.forward(x)).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &block);
        assert!(grads.get::<Flex, 2>(block.expand.weight.id).is_some());
    }

    #[test]
    fn a_block_run_twice_gets_the_gradients_of_both_runs() {
        let _generator = generator();
        let device = Default::default();
        let block = Mlp::<B>::new(0.0, &device);
        block.visit(&mut Initialise);
        let x = Tensor::<B, 3>::random([2, 3, 8], Distribution::Default, &device);
        let grad = |checkpointed: bool| {
            let _on = checkpointed.then(Recomputing::on::<B>);
            let twice = (0..2).fold(x.clone(), |x, _| {
                recompute(&block, x, |block, x| block.forward(x))
            });
            let grads = GradientsParams::from_grads(twice.sum().backward(), &block);
            let grad = grads.get::<Flex, 2>(block.expand.weight.id).unwrap();
            grad.into_data().to_vec::<f32>().unwrap()
        };
        assert_eq!(grad(true), grad(false));
    }

    #[test]
    fn a_captured_tensor_that_needs_a_gradient_fails_with_a_message_instead_of_hanging() {
        let device = Default::default();
        let block = Mlp::<B>::new(0.0, &device);
        block.visit(&mut Initialise);
        let scale = Tensor::<B, 3>::ones([1, 1, 8], &device).require_grad() * 2.0;
        let x = Tensor::<B, 3>::ones([2, 3, 8], &device);
        let _on = Recomputing::on::<B>();
        let captured = scale.clone();
        let y = recompute(&block, x, move |block, x| {
            block.forward(x) * captured.clone()
        });
        let loss = (y * scale).sum();
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            loss.backward();
        }));
        let failure = failure.expect_err("a failure");
        let message = (failure.downcast_ref::<&str>().map(|m| m.to_string()))
            .or_else(|| failure.downcast_ref::<String>().cloned())
            .unwrap();
        assert!(
            message.contains("it would wait on that backward pass"),
            "{message}"
        );
    }

    #[test]
    fn turning_it_off_restores_what_was_before() {
        assert!(runner::<B>().is_none());
        let outer = Recomputing::on::<B>();
        drop(Recomputing::on::<B>());
        assert!(runner::<B>().is_some());
        drop(outer);
        assert!(runner::<B>().is_none());
        assert!(runner::<Flex>().is_none());
    }
}
