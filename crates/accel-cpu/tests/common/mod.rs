//! What the kernel tests share: inputs drawn by a generator of their own, a loss whose
//! gradient differs per element, and the comparison with burn's layers.

use burn::tensor::{Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};

pub type B = Autodiff<Flex>;

/// Values drawn from `seed` by a generator of the test's own (tests run on parallel threads,
/// so burn's one seeded generator would not give each the same draws).
pub fn drawn<const D: usize>(shape: [usize; D], seed: u64, low: f32, high: f32) -> Tensor<B, D> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let count = shape.iter().product();
    let values: Vec<f32> = (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            low + (high - low) * (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), &FlexDevice)
}

/// An input offset and spread away from 0 and 1, so a wrong mean or variance shows.
pub fn input<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    drawn(shape, seed, -1.0, 7.0)
}

/// A loss whose gradient differs per element (a plain sum's would make the input's gradient 0).
pub fn weighted_sum<const D: usize>(y: Tensor<B, D>) -> Tensor<B, 1> {
    let weights = drawn(y.dims(), 99, -1.0, 1.0);
    (y * weights).sum()
}

/// Asserts that each of ember's results (`names`) is burn's up to float rounding.
pub fn assert_close(names: &[&str], ember: &[TensorData], burn: &[TensorData]) {
    for ((name, a), b) in names.iter().zip(ember).zip(burn) {
        assert_eq!(a.shape, b.shape, "{name}'s shape");
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                "{name}[{i}]: {x} on ember's kernel, {y} on burn's layer"
            );
        }
    }
}
