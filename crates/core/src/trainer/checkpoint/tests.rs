//! The file format: what is written where, and what a reader refuses.

use burn::module::ParamId;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::DType;
use burn_flex::{Flex, FlexDevice};

use super::*;

fn position(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("present")
}

#[test]
fn round_trip_and_clear_errors() {
    let path = Path::new("x.ckpt");
    let progress = Progress {
        epoch: 2,
        global_step: 40,
        ..Progress::default()
    };
    let weight = TensorData::new(vec![1.5f64, -2.0, 3.25], [3]);
    let bytes = Checkpoint::encode(
        progress,
        BTreeMap::from([("val_acc".into(), 0.5)]),
        vec![("layer.weight".into(), ParamId::new(), weight.clone())],
        vec![("optimizer".into(), vec![9, 8, 7])],
    )
    .unwrap();
    let ck = Checkpoint::decode(&bytes, path).unwrap();
    assert_eq!(ck.header.global_step, 40);
    assert_eq!(ck.sections["optimizer"], vec![9, 8, 7]);
    assert_eq!(ck.weights["layer.weight"], weight, "f64 stays f64");

    let e = Checkpoint::decode(&bytes[..bytes.len() - 1], path).unwrap_err();
    assert!(e.to_string().contains("x.ckpt is truncated"), "{e}");
    let e = Checkpoint::decode(&bytes[..5], path).unwrap_err();
    assert!(e.to_string().contains("x.ckpt is truncated"), "{e}");
    let e = Checkpoint::decode(b"PK\x03\x04 not a checkpoint", path).unwrap_err();
    assert!(e.to_string().contains("not an ember checkpoint"), "{e}");

    let mut flipped = bytes.clone();
    let at = position(&bytes, &1.5f64.to_le_bytes());
    flipped[at] ^= 0x10;
    let e = Checkpoint::decode(&flipped, path).unwrap_err();
    assert!(
        e.to_string()
            .contains("weight `layer.weight` fails its checksum"),
        "{e}"
    );
    let mut flipped = bytes.clone();
    flipped[position(&bytes, &[9, 8, 7])] ^= 0x01;
    let e = Checkpoint::decode(&flipped, path).unwrap_err();
    assert!(
        e.to_string()
            .contains("section `optimizer` fails its checksum"),
        "{e}"
    );
    let mut flipped = bytes.clone();
    flipped[position(&bytes, b"global_step") + 14] ^= 0x01;
    let e = Checkpoint::decode(&flipped, path).unwrap_err();
    assert!(e.to_string().contains("corrupt header"), "{e}");

    let mut future = ck.header.clone();
    future.format_version = 9;
    let weights: Vec<(String, TensorData)> = ck.weights.clone().into_iter().collect();
    let sections: Vec<(String, Vec<u8>)> = ck.sections.clone().into_iter().collect();
    let wrong = Checkpoint::encode_header(&future, &weights, [("", &[]); 2], &sections).unwrap();
    let e = Checkpoint::decode(&wrong, path).unwrap_err();
    assert!(e.to_string().contains("version 9"), "{e}");
}

/// A checkpoint of `model`'s weights alone.
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
