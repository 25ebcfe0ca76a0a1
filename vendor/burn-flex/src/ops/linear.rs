//! The gradients of a linear layer's weight and bias as one product and one sum over every row
//! of the input.
//!
//! burn-backend's default weight gradient for `x` `[b, t, k]` is `b` products of
//! `[k, t] × [t, n]`, each written out in full (`b` copies of the weight's size), then summed
//! over the batch; its bias gradient sums one dimension at a time. Here the leading dimensions
//! are folded into the rows (a free reshape of a contiguous tensor): the weight gradient is one
//! `[k, rows] × [rows, n]` product whose inner dimension runs over the whole batch, and the bias
//! gradient one sum over the rows. A rank-2 input runs exactly the ops of the default. The
//! forward pass and the input gradient keep the default's batched product, which runs the
//! batch items in parallel and is as fast or faster at these shapes.

use alloc::vec::Vec;

use burn_backend::TensorMetadata;
use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::FloatTensor;
use burn_std::Shape;

use crate::Flex;

/// `tensor` `[d0, ..., dn]` as `[d0·…·d(n-1), dn]`, and its leading dimensions.
fn as_rows(tensor: FloatTensor<Flex>) -> (FloatTensor<Flex>, Vec<usize>) {
    let shape = tensor.shape();
    let dims = shape.num_dims();
    let all: Vec<usize> = (0..dims).map(|i| shape[i]).collect();
    let (leading, last) = all.split_at(dims - 1);
    let rows = leading.iter().product();
    let tensor = Flex::float_reshape(tensor, Shape::new([rows, last[0]]));
    (tensor, leading.to_vec())
}

/// The weight's gradient, `xᵀ @ output_grad` over every row of the batch.
pub fn linear_weight_backward(
    x: FloatTensor<Flex>,
    output_grad: FloatTensor<Flex>,
) -> FloatTensor<Flex> {
    let (x, _) = as_rows(x);
    let (grad, _) = as_rows(output_grad);
    Flex::float_matmul(Flex::float_swap_dims(x, 0, 1), grad)
}

/// The bias's gradient, `output_grad` summed over every row.
pub fn linear_bias_backward(output_grad: FloatTensor<Flex>) -> FloatTensor<Flex> {
    let (grad, _) = as_rows(output_grad);
    let n = grad.shape()[1];
    Flex::float_reshape(Flex::float_sum_dim(grad, 0), Shape::new([n]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FlexTensor;
    use burn_backend::TensorData;

    fn tensor(shape: &[usize], seed: u32) -> FlexTensor {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
            })
            .collect();
        FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
    }

    fn data(t: FlexTensor) -> Vec<f32> {
        t.into_data().to_vec::<f32>().unwrap()
    }

    fn assert_close(got: FlexTensor, want: FlexTensor) {
        assert_eq!(got.shape(), want.shape());
        for (g, w) in data(got).iter().zip(data(want)) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} against {w}");
        }
    }

    /// burn-backend's default weight gradient: one product per batch item, summed.
    fn batched_weight_grad(x: FlexTensor, g: FlexTensor) -> FlexTensor {
        let rank = x.shape().num_dims();
        let mut grad = Flex::float_matmul(Flex::float_swap_dims(x, rank - 2, rank - 1), g);
        for dim in 0..rank - 2 {
            grad = Flex::float_sum_dim(grad, dim);
        }
        let shape = grad.shape();
        Flex::float_reshape(grad, Shape::new([shape[rank - 2], shape[rank - 1]]))
    }

    /// burn-backend's default bias gradient: one dimension summed at a time.
    fn dim_by_dim_bias_grad(g: FlexTensor) -> FlexTensor {
        let rank = g.shape().num_dims();
        let n = g.shape()[rank - 1];
        let grad = (0..rank - 1).fold(g, Flex::float_sum_dim);
        Flex::float_reshape(grad, Shape::new([n]))
    }

    #[test]
    fn gradients_over_a_batch_of_sequences_match_the_default() {
        for (x, g) in [
            (tensor(&[3, 5, 4], 1), tensor(&[3, 5, 6], 2)),
            (tensor(&[2, 3, 5, 4], 3), tensor(&[2, 3, 5, 7], 4)),
        ] {
            let want = batched_weight_grad(x.clone(), g.clone());
            assert_close(linear_weight_backward(x, g.clone()), want);
            assert_close(linear_bias_backward(g.clone()), dim_by_dim_bias_grad(g));
        }
    }

    #[test]
    fn gradients_of_a_rank_2_input_are_the_defaults_bitwise() {
        let (x, g) = (tensor(&[64, 48], 5), tensor(&[64, 40], 6));
        let want = batched_weight_grad(x.clone(), g.clone());
        assert_eq!(data(linear_weight_backward(x, g.clone())), data(want));
        let want = dim_by_dim_bias_grad(g.clone());
        assert_eq!(data(linear_bias_backward(g)), data(want));
    }
}
