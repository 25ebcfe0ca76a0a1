use core::marker::PhantomData;

use crate::{
    Autodiff,
    checkpoint::{
        base::Checkpointer, retro_forward::RetroForward, state::BackwardStates,
        strategy::CheckpointStrategy,
    },
    grads::Gradients,
    graph::NodeId,
    ops::{Backward, Ops, OpsKind, unary},
    retro_unary,
};
use burn_backend::{Backend, ops::ActivationOps, tensor::FloatTensor};

impl<B: Backend, C: CheckpointStrategy> ActivationOps<Autodiff<B, C>> for Autodiff<B, C> {
    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Gelu;

        retro_unary!(RetroGelu, B::gelu);

        impl<B: Backend> Backward<B, 1> for Gelu {
            type State = NodeId;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let input = checkpointer.retrieve_node_output(ops.state);

                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::gelu_backward(input, grad)
                });
            }
        }

        match Gelu
            .prepare::<C>([tensor.node.clone()])
            .memory_bound()
            .retro_forward(RetroGelu::<B>::new(tensor.node.id))
            .parents([&tensor])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&tensor);
                prep.finish(state, B::gelu(tensor.primitive.clone()))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::gelu(tensor.primitive)),
        }
    }

    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Relu;

        retro_unary!(RetroRelu, B::relu);

        impl<B: Backend> Backward<B, 1> for Relu {
            type State = NodeId;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let state = checkpointer.retrieve_node_output(ops.state);
                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::relu_backward(state, grad)
                });
            }
        }

        match Relu
            .prepare::<C>([tensor.node.clone()])
            .memory_bound()
            .retro_forward(RetroRelu::<B>::new(tensor.node.id))
            .parents([&tensor])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&tensor);
                prep.finish(state, B::relu(tensor.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::relu(tensor.primitive)),
        }
    }

    fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Sigmoid;

        retro_unary!(RetroSigmoid, B::sigmoid);

        impl<B: Backend> Backward<B, 1> for Sigmoid {
            type State = NodeId;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let input = checkpointer.retrieve_node_output(ops.state);
                let output = B::sigmoid(input);
                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::sigmoid_backward(output, grad)
                });
            }
        }

        match Sigmoid
            .prepare::<C>([tensor.node.clone()])
            .memory_bound()
            .retro_forward(RetroSigmoid::<B>::new(tensor.node.id))
            .parents([&tensor])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&tensor);
                prep.finish(state, B::sigmoid(tensor.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::sigmoid(tensor.primitive)),
        }
    }

    fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct LogSigmoid;

        retro_unary!(RetroLogSigmoid, B::log_sigmoid);

        impl<B: Backend> Backward<B, 1> for LogSigmoid {
            type State = NodeId;

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let input = checkpointer.retrieve_node_output(ops.state);

                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    B::log_sigmoid_backward(input, grad)
                });
            }
        }

        match LogSigmoid
            .prepare::<C>([tensor.node.clone()])
            .memory_bound()
            .retro_forward(RetroLogSigmoid::<B>::new(tensor.node.id))
            .parents([&tensor])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&tensor);
                prep.finish(state, B::log_sigmoid(tensor.primitive.clone()))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::log_sigmoid(tensor.primitive)),
        }
    }

    fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        #[derive(Debug)]
        struct Softmax;

        impl<B: Backend> Backward<B, 1> for Softmax {
            type State = (NodeId, usize);

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                checkpointer: &mut Checkpointer,
            ) {
                let (input, dim) = ops.state;
                let output = B::softmax(checkpointer.retrieve_node_output(input), dim);
                // dx = y ⊙ (dy − Σ_dim dy ⊙ y)
                unary::<B, _>(ops.parents, ops.node, grads, |grad| {
                    let dot = B::float_sum_dim(B::float_mul(grad.clone(), output.clone()), dim);
                    B::float_mul(output, B::float_sub(grad, dot))
                });
            }
        }

        match Softmax
            .prepare::<C>([tensor.node.clone()])
            .memory_bound()
            .retro_forward(RetroSoftmax::<B>::new(tensor.node.id, dim))
            .parents([&tensor])
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = prep.checkpoint(&tensor);
                prep.finish((state, dim), B::softmax(tensor.primitive, dim))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::softmax(tensor.primitive, dim)),
        }
    }
}

/// Recomputes a softmax for checkpointing.
#[derive(new, Debug, Clone)]
struct RetroSoftmax<B: Backend> {
    input_id: NodeId,
    dim: usize,
    _backend: PhantomData<B>,
}

impl<B: Backend> RetroForward for RetroSoftmax<B> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        let input = states.get_state::<B::FloatTensorPrimitive>(&self.input_id);
        states.save(out_node, B::softmax(input, self.dim))
    }
}

/// The softmax node against the composite it replaces (burn-backend's default: a detached max
/// shift, `exp`, `sum_dim` and `div`, each its own node).
#[cfg(test)]
mod tests {
    use burn_flex::Flex;
    use burn_tensor::{Distribution, Tensor, activation};

    type Ad = crate::Autodiff<Flex>;

    fn composite(x: Tensor<Ad, 3>, dim: usize) -> Tensor<Ad, 3> {
        let exp = (x.clone() - x.detach().max_dim(dim)).exp();
        exp.clone() / exp.sum_dim(dim)
    }

    /// Output and input gradient of `Σ f(x) ⊙ w` through `f`.
    fn run(
        f: impl Fn(Tensor<Ad, 3>) -> Tensor<Ad, 3>,
        x: &Tensor<Flex, 3>,
        w: &Tensor<Flex, 3>,
    ) -> (Vec<f32>, Vec<f32>) {
        let x = Tensor::<Ad, 3>::from_inner(x.clone()).require_grad();
        let y = f(x.clone());
        let grads = (y.clone() * Tensor::from_inner(w.clone())).sum().backward();
        let values = |t: Tensor<Flex, 3>| t.into_data().to_vec::<f32>().unwrap();
        (values(y.inner()), values(x.grad(&grads).unwrap()))
    }

    #[test]
    fn softmax_matches_the_composite() {
        let device = Default::default();
        let x = Tensor::<Flex, 3>::random([3, 4, 70], Distribution::Normal(0.0, 3.0), &device);
        let w = Tensor::<Flex, 3>::random([3, 4, 70], Distribution::Normal(0.0, 1.0), &device);
        for dim in 0..3 {
            let fused = run(|x| activation::softmax(x, dim), &x, &w);
            let want = run(|x| composite(x, dim), &x, &w);
            for (name, ours, want) in [("output", fused.0, want.0), ("gradient", fused.1, want.1)] {
                for (a, b) in ours.iter().zip(&want) {
                    let close = (a - b).abs() <= 1e-5 * (1.0 + b.abs());
                    assert!(close, "dim {dim} {name}: {a} vs {b}");
                }
            }
        }
    }
}
