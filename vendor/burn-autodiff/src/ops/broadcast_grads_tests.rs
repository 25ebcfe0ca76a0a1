//! The gradients that patches 2 and 3 compute in fewer passes, against the formulas they replace,
//! evaluated on the inner backend: `x - m` and `x / s` for a per-channel `m` and `s` (as batch
//! norm broadcasts them), and `mean_dim`.

use burn_flex::Flex;
use burn_tensor::{Distribution, Tensor};

type Ad = crate::Autodiff<Flex>;

fn values<const D: usize>(t: Tensor<Flex, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

fn random<const D: usize>(shape: [usize; D], low: f64) -> Tensor<Flex, D> {
    Tensor::random(shape, Distribution::Uniform(low, 2.0), &Default::default())
}

/// The gradients of `Σ f(x, c) ⊙ w` with respect to `x` and `c`.
fn grads(
    f: impl Fn(Tensor<Ad, 4>, Tensor<Ad, 4>) -> Tensor<Ad, 4>,
    x: &Tensor<Flex, 4>,
    c: &Tensor<Flex, 4>,
    w: &Tensor<Flex, 4>,
) -> (Tensor<Flex, 4>, Tensor<Flex, 4>) {
    let x = Tensor::<Ad, 4>::from_inner(x.clone()).require_grad();
    let c = Tensor::<Ad, 4>::from_inner(c.clone()).require_grad();
    let out = (f(x.clone(), c.clone()) * Tensor::from_inner(w.clone())).sum();
    let grads = out.backward();
    (x.grad(&grads).unwrap(), c.grad(&grads).unwrap())
}

#[test]
fn sub_of_a_per_channel_value_gives_the_negated_sum_bitwise() {
    let (x, m, w) = (
        random([4, 3, 5, 6], -2.0),
        random([1, 3, 1, 1], -2.0),
        random([4, 3, 5, 6], -2.0),
    );
    let (dx, dm) = grads(|x, m| x - m, &x, &m, &w);
    assert_eq!(values(dx), values(w.clone()));
    let want = w.neg().sum_dim(0).sum_dim(2).sum_dim(3);
    assert_eq!(values(dm), values(want));
}

#[test]
fn div_by_a_per_channel_value_matches_the_elementwise_formula() {
    let (x, s, w) = (
        random([4, 3, 5, 6], -2.0),
        random([1, 3, 1, 1], 0.5),
        random([4, 3, 5, 6], -2.0),
    );
    let (dx, ds) = grads(|x, s| x / s, &x, &s, &w);
    assert_eq!(values(dx), values(w.clone() * s.clone().recip()));
    // The unpatched formula: `grad · (-x / s²)` at the output's size, then summed.
    let want = (w * (x.neg() / s.powi_scalar(2)))
        .sum_dim(0)
        .sum_dim(2)
        .sum_dim(3);
    for (a, b) in values(ds).iter().zip(values(want)) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

#[test]
fn div_of_same_shapes_keeps_the_elementwise_formula_bitwise() {
    let (x, s, w) = (
        random([2, 3, 4, 5], -2.0),
        random([2, 3, 4, 5], 0.5),
        random([2, 3, 4, 5], -2.0),
    );
    let (_, ds) = grads(|x, s| x / s, &x, &s, &w);
    assert_eq!(values(ds), values(w * (x.neg() / s.powi_scalar(2))));
}

#[test]
fn mean_dim_spreads_the_scaled_gradient_bitwise() {
    let x = Tensor::<Ad, 2>::from_inner(random([3, 7], -2.0)).require_grad();
    let w = random([3, 1], -2.0);
    let grads = (x.clone().mean_dim(1) * Tensor::from_inner(w.clone()))
        .sum()
        .backward();
    // The unpatched formula: a tensor of `1/7` at the input's size times the gradient.
    let ones = Tensor::<Flex, 2>::ones([3, 7], &Default::default());
    let want = ones.mul_scalar(1.0 / 7.0) * w;
    assert_eq!(values(x.grad(&grads).unwrap()), values(want));
}

#[test]
fn square_gives_the_sum_of_both_operands_gradients_bitwise() {
    let (x, w) = (random([4, 3, 5, 6], -2.0), random([4, 3, 5, 6], -2.0));
    let leaf = Tensor::<Ad, 4>::from_inner(x.clone()).require_grad();
    // `x` is a computed node whose square is its only use, as in batch norm's variance.
    let centred = leaf.clone() - 0.5;
    let out = (centred.square() * Tensor::from_inner(w.clone())).sum();
    let dx = leaf.grad(&out.backward()).unwrap();
    let product = w * (x - 0.5);
    assert_eq!(values(dx), values(product.clone() + product));
}

#[test]
fn square_of_a_value_used_twice_sums_as_the_unpatched_backward_does() {
    let (x, w) = (random([2, 3, 4, 5], -2.0), random([2, 3, 4, 5], -2.0));
    let leaf = Tensor::<Ad, 4>::from_inner(x.clone()).require_grad();
    let out = ((leaf.clone().square() + leaf.clone() * 3.0) * Tensor::from_inner(w.clone())).sum();
    let dx = values(leaf.grad(&out.backward()).unwrap());
    let (product, linear) = (w.clone() * x, w * 3.0);
    // Unpatched, `grad · x` is added twice, before or after the other use's gradient.
    let square_first = (product.clone() + product.clone()) + linear.clone();
    let square_last = (product.clone() + linear) + product;
    assert!(dx == values(square_first) || dx == values(square_last));
}
