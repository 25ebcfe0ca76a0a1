//! The checkpoint format on a real module: weights keep their names, dtypes and parameter ids,
//! and weights that do not fit a model are refused naming the parameter.

use std::collections::BTreeMap;
use std::path::Path;

use burn::nn::{Linear, LinearConfig};
use burn::tensor::DType;
use burn_flex::{Flex, FlexDevice};
use ember_core::trainer::checkpoint::{Checkpoint, Progress, weights_of};

fn checkpoint_of(model: &Linear<Flex>) -> Checkpoint {
    let bytes = Checkpoint::encode(
        Progress::default(),
        BTreeMap::new(),
        weights_of(model).unwrap(),
        Vec::new(),
    )
    .unwrap();
    Checkpoint::decode(&bytes, Path::new("a.ckpt")).unwrap()
}

#[test]
fn weights_round_trip_with_their_ids_and_misfits_are_named() {
    let device = FlexDevice;
    let saved: Linear<Flex> = LinearConfig::new(3, 2).init(&device);
    let checkpoint = checkpoint_of(&saved);
    assert_eq!(
        checkpoint.weights.keys().collect::<Vec<_>>(),
        ["bias", "weight"]
    );
    assert_eq!(checkpoint.weights["weight"].dtype, DType::F32);

    let fresh: Linear<Flex> = LinearConfig::new(3, 2).init(&device);
    let loaded = checkpoint.load_model(fresh, Path::new("a.ckpt")).unwrap();
    assert_eq!(
        loaded.weight.id, saved.weight.id,
        "the optimizer's keys survive"
    );
    assert_eq!(
        loaded.weight.val().into_data(),
        saved.weight.val().into_data()
    );

    let wider: Linear<Flex> = LinearConfig::new(4, 2).init(&device);
    let e = checkpoint
        .load_model(wider, Path::new("a.ckpt"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a.ckpt") && e.contains("weight has shape [3, 2], the model's parameter [4, 2]"),
        "{e}"
    );

    let no_bias: Linear<Flex> = LinearConfig::new(3, 2).with_bias(false).init(&device);
    let e = checkpoint
        .load_model(no_bias, Path::new("a.ckpt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("the model has no parameter for bias"), "{e}");
}
