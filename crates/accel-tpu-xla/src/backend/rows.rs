//! A batch's tensor split by rows over the devices of a spanning device: each device holds
//! `ceil(rows / devices)` rows, the last ones padded with zeros, as XLA's SPMD partitioner lays
//! out an array sharded along its first dimension.

use burn_backend::TensorData;

/// The rows each of `devices` devices holds of a tensor of `rows` rows.
pub fn per_device(rows: usize, devices: usize) -> usize {
    rows.div_ceil(devices).max(1)
}

/// `data` cut into `devices` shards of [`per_device`] rows each (zeros past its last row).
pub fn split(data: &TensorData, devices: usize) -> Vec<TensorData> {
    let rows = data.shape[0];
    let row_bytes = data.as_bytes().len() / rows.max(1);
    let each = per_device(rows, devices);
    let mut shape = data.shape.clone();
    shape[0] = each;
    (0..devices)
        .map(|d| {
            let mut bytes = vec![0u8; each * row_bytes];
            let start = (d * each).min(rows);
            let end = ((d + 1) * each).min(rows);
            let taken = &data.as_bytes()[start * row_bytes..end * row_bytes];
            bytes[..taken.len()].copy_from_slice(taken);
            TensorData::from_bytes_vec(bytes, shape.clone(), data.dtype)
        })
        .collect()
}

/// The tensor of `shape` whose rows the devices hold as `shards` (each device's bytes, in
/// device order, padding rows included).
pub fn join(shards: Vec<Vec<u8>>, shape: &[usize], dtype: burn_backend::DType) -> TensorData {
    let total: usize = shards.iter().map(Vec::len).sum();
    let rows = shape[0];
    let padded_rows = per_device(rows, shards.len()) * shards.len();
    let row_bytes = total / padded_rows.max(1);
    let mut bytes = shards.concat();
    bytes.truncate(rows * row_bytes);
    TensorData::from_bytes_vec(bytes, shape.to_vec(), dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_with_padding_and_join_back() {
        let data = TensorData::new((0..10i32).collect::<Vec<_>>(), [5, 2]);
        let shards = split(&data, 4);
        assert_eq!(shards.len(), 4);
        let rows: Vec<Vec<i32>> = shards.iter().map(|s| s.to_vec().unwrap()).collect();
        assert_eq!(
            rows,
            [
                vec![0, 1, 2, 3],
                vec![4, 5, 6, 7],
                vec![8, 9, 0, 0],
                vec![0, 0, 0, 0]
            ]
        );
        assert_eq!(shards[0].shape.to_vec(), [2, 2]);
        let bytes = shards.iter().map(|s| s.as_bytes().to_vec()).collect();
        assert_eq!(join(bytes, &[5, 2], data.dtype), data);
    }
}
