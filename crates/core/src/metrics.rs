//! What a classifier's steps compute on the device and log, as functions:
//! `log.log("train_loss", metrics::cross_entropy(logits, classes))`. Each returns a
//! one-element tensor, read only when the loops need its value.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// The mean cross-entropy of `logits` `[n, classes]` against the class of each row in
/// `classes` `[n]`: burn's `CrossEntropyLoss` with its default config (no padding index, no
/// label smoothing), as a function.
pub fn cross_entropy<B: Backend>(logits: Tensor<B, 2>, classes: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let loss = CrossEntropyLossConfig::new().init(&logits.device());
    loss.forward(logits, classes)
}

/// The share of rows of `logits` `[n, classes]` whose largest entry is at the row's class in
/// `classes` `[n]` (ties go to the first largest).
pub fn accuracy<B: Backend>(logits: Tensor<B, 2>, classes: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let predicted = logits.argmax(1).squeeze_dim::<1>(1);
    predicted.equal(classes).float().mean()
}

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;

    use super::*;

    type B = burn_flex::Flex;

    #[test]
    fn accuracy_counts_rows_whose_argmax_is_the_class_and_cross_entropy_averages_rows() {
        let device = Default::default();
        let logits = Tensor::<B, 2>::from_data(
            TensorData::from([[0.1, 0.9], [2.0, -1.0], [0.3, 0.2], [0.0, 5.0]]),
            &device,
        );
        let classes = Tensor::<B, 1, Int>::from_data(TensorData::from([1, 0, 1, 1]), &device);
        let accuracy: f32 = accuracy(logits.clone(), classes.clone()).into_scalar();
        assert_eq!(accuracy, 0.75);
        // Each row's -ln softmax at its class is ln(1 + e^(other - own)); the loss is their mean.
        let rows = [
            1.0 + (-0.8f32).exp(),
            1.0 + (-3.0f32).exp(),
            1.0 + 0.1f32.exp(),
            1.0 + (-5.0f32).exp(),
        ];
        let expected = rows.iter().map(|r| r.ln()).sum::<f32>() / 4.0;
        let loss: f32 = cross_entropy(logits, classes).into_scalar();
        assert!((loss - expected).abs() < 1e-6, "{loss} vs {expected}");
    }
}
