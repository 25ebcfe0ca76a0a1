//! A batcher for items that are already numbers, so a data module of plain rows needs no
//! batcher of its own (as torch's default collate serves a `TensorDataset`).

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// Stacks items that are numbers into tensors, one row (or slice) per item:
///
/// - `([f32; N], i64)`, features and a class: `(Tensor<B, 2>, Tensor<B, 1, Int>)` of shapes
///   `[n, N]` and `[n]`;
/// - `([f32; N], [f32; M])`, features and targets: `(Tensor<B, 2>, Tensor<B, 2>)` of shapes
///   `[n, N]` and `[n, M]`;
/// - arrays of any shape as burn's `TensorData` (an image `[3, 32, 32]`, a window of tokens):
///   `TensorData` → `Tensor<B, D>`, `(TensorData, i64)` → `(Tensor<B, D>, Tensor<B, 1, Int>)`
///   and `(TensorData, TensorData)` → `(Tensor<B, D>, Tensor<B, E>)`, each of shape
///   `[n, item's shape...]` in floats. Every item of a batch has one shape, of rank `D - 1`
///   (the loader reports a batch that breaks this as an error).
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

/// Same-shape arrays as one float tensor `[arrays.len(), shape...]`.
///
/// # Panics
/// When the arrays differ in shape or are not of rank `D - 1` (the loader turns the panic
/// into an error naming the batch).
fn stacked<B: Backend, const D: usize>(
    arrays: Vec<TensorData>,
    device: &B::Device,
) -> Tensor<B, D> {
    let n = arrays.len();
    let shape = arrays
        .first()
        .map_or_else(|| vec![0; D - 1], |a| a.shape.to_vec());
    assert!(
        shape.len() + 1 == D,
        "Stack: items of shape {shape:?} make a batch of rank {}, not {D}",
        shape.len() + 1
    );
    let mut values = Vec::with_capacity(n * shape.iter().product::<usize>());
    for (i, array) in arrays.into_iter().enumerate() {
        assert!(
            array.shape.as_slice() == shape,
            "Stack: item {i} of the batch has shape {:?}, item 0 {shape:?}",
            array.shape.as_slice()
        );
        values.extend(
            array
                .convert::<f32>()
                .into_vec::<f32>()
                .expect("converted to f32"),
        );
    }
    let shape: Vec<usize> = std::iter::once(n).chain(shape).collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

impl<B: Backend, const D: usize> Batcher<B, TensorData, Tensor<B, D>> for Stack {
    fn batch(&self, items: Vec<TensorData>, device: &B::Device) -> Tensor<B, D> {
        stacked(items, device)
    }
}

impl<B: Backend, const D: usize> Batcher<B, (TensorData, i64), (Tensor<B, D>, Tensor<B, 1, Int>)>
    for Stack
{
    fn batch(
        &self,
        items: Vec<(TensorData, i64)>,
        device: &B::Device,
    ) -> (Tensor<B, D>, Tensor<B, 1, Int>) {
        let (arrays, classes): (Vec<_>, Vec<_>) = items.into_iter().unzip();
        let n = classes.len();
        let classes = Tensor::from_data(TensorData::new(classes, [n]), device);
        (stacked(arrays, device), classes)
    }
}

impl<B: Backend, const D: usize, const E: usize>
    Batcher<B, (TensorData, TensorData), (Tensor<B, D>, Tensor<B, E>)> for Stack
{
    fn batch(
        &self,
        items: Vec<(TensorData, TensorData)>,
        device: &B::Device,
    ) -> (Tensor<B, D>, Tensor<B, E>) {
        let (inputs, targets): (Vec<_>, Vec<_>) = items.into_iter().unzip();
        (stacked(inputs, device), stacked(targets, device))
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

    #[test]
    fn arrays_of_any_shape_stack_along_a_new_first_dimension() {
        let image = |v: f32| TensorData::new(vec![v; 12], [3, 2, 2]);
        let items = vec![(image(1.0), 4), (image(2.0), 7)];
        let (x, y): (Tensor<B, 4>, Tensor<B, 1, Int>) = Stack.batch(items, &Default::default());
        assert_eq!(x.dims(), [2, 3, 2, 2]);
        let values = x.to_data().to_vec::<f32>().unwrap();
        assert_eq!(values[..12], [1.0; 12]);
        assert_eq!(values[12..], [2.0; 12]);
        let classes: Vec<i64> = y.to_data().convert::<i64>().to_vec().unwrap();
        assert_eq!(classes, [4, 7]);
        // Bytes become floats; a pair of arrays gives two tensors.
        let bytes = TensorData::new(vec![3u8, 250], [2]);
        let small = TensorData::new(vec![0.5f32; 6], [3, 2]);
        let (a, b): (Tensor<B, 2>, Tensor<B, 3>) =
            Stack.batch(vec![(bytes, small)], &Default::default());
        assert_eq!(a.to_data().to_vec::<f32>().unwrap(), [3.0, 250.0]);
        assert_eq!(b.dims(), [1, 3, 2]);
    }

    #[test]
    fn arrays_of_two_shapes_or_the_wrong_rank_are_refused_by_item() {
        let caught = |items: Vec<TensorData>| {
            let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _: Tensor<B, 3> = Stack.batch(items, &Default::default());
            }))
            .unwrap_err();
            panic.downcast_ref::<String>().cloned().unwrap_or_default()
        };
        let a = TensorData::new(vec![0f32; 4], [2, 2]);
        let b = TensorData::new(vec![0f32; 6], [2, 3]);
        let err = caught(vec![a.clone(), b]);
        assert!(
            err.contains("item 1 of the batch has shape [2, 3], item 0 [2, 2]"),
            "{err}"
        );
        let err = caught(vec![TensorData::new(vec![0f32; 2], [2])]);
        assert!(err.contains("make a batch of rank 2, not 3"), "{err}");
    }
}
