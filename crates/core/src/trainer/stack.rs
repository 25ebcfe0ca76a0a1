//! A batcher for items that are already numbers, so a data module of plain rows needs no
//! batcher of its own (as torch's default collate serves a `TensorDataset`).

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// Stacks items of fixed-size `f32` rows into tensors, one row per item:
///
/// - `([f32; N], i64)`, features and a class: `(Tensor<B, 2>, Tensor<B, 1, Int>)` of shapes
///   `[n, N]` and `[n]`;
/// - `([f32; N], [f32; M])`, features and targets: `(Tensor<B, 2>, Tensor<B, 2>)` of shapes
///   `[n, N]` and `[n, M]`.
///
/// A data module with such items names it as its batcher (`type Batcher = Stack;`), and the
/// model's `Batch` is the pair of tensors.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stack;

/// The rows as one `[rows.len(), N]` tensor.
fn rows<B: Backend, const N: usize>(rows: Vec<[f32; N]>, device: &B::Device) -> Tensor<B, 2> {
    let n = rows.len();
    let values: Vec<f32> = rows.into_iter().flatten().collect();
    Tensor::from_data(TensorData::new(values, [n, N]), device)
}

impl<B: Backend, const N: usize> Batcher<B, ([f32; N], i64), (Tensor<B, 2>, Tensor<B, 1, Int>)>
    for Stack
{
    fn batch(
        &self,
        items: Vec<([f32; N], i64)>,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let (features, classes): (Vec<_>, Vec<_>) = items.into_iter().unzip();
        let n = classes.len();
        let classes = Tensor::from_data(TensorData::new(classes, [n]), device);
        (rows(features, device), classes)
    }
}

impl<B: Backend, const N: usize, const M: usize>
    Batcher<B, ([f32; N], [f32; M]), (Tensor<B, 2>, Tensor<B, 2>)> for Stack
{
    fn batch(
        &self,
        items: Vec<([f32; N], [f32; M])>,
        device: &B::Device,
    ) -> (Tensor<B, 2>, Tensor<B, 2>) {
        let (features, targets): (Vec<_>, Vec<_>) = items.into_iter().unzip();
        (rows(features, device), rows(targets, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = burn_flex::Flex;

    #[test]
    fn classes_stack_into_a_row_matrix_and_a_class_vector() {
        let items = vec![([1.0, 2.0], 0), ([3.0, 4.0], 2), ([5.0, 6.0], 1)];
        let (x, y): (Tensor<B, 2>, Tensor<B, 1, Int>) = Stack.batch(items, &Default::default());
        assert_eq!(x.dims(), [3, 2]);
        assert_eq!(
            x.to_data().to_vec::<f32>().unwrap(),
            [1., 2., 3., 4., 5., 6.]
        );
        let classes: Vec<i64> = y.to_data().convert::<i64>().to_vec().unwrap();
        assert_eq!(classes, [0, 2, 1]);
    }

    #[test]
    fn targets_stack_into_a_row_matrix_each() {
        let items = vec![([0.5], [1.0, -1.0]), ([1.5], [2.0, -2.0])];
        let (x, y): (Tensor<B, 2>, Tensor<B, 2>) = Stack.batch(items, &Default::default());
        assert_eq!(x.dims(), [2, 1]);
        assert_eq!(y.dims(), [2, 2]);
        assert_eq!(y.to_data().to_vec::<f32>().unwrap(), [1., -1., 2., -2.]);
    }
}
