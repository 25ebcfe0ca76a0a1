//! The tests of [`recompute`](super::recompute) and [`Recomputing`](super::Recomputing).

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
    let on = Recomputing::on::<B>();
    assert_eq!(on.blocks_recomputed(), 0);
    let loss = recompute(&block, x, |block, x| block.forward(x)).sum();
    assert_eq!(on.blocks_recomputed(), 1);
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
