//! Mutations of a checkpoint holding every kind of entry (weights, optimizer state, a
//! callback's tensor, sections): flipped bytes, cuts, a lying length, edited safetensors
//! entries, and edits of the ember header with its checksum recomputed. None may panic a
//! reader; every edit that breaks the header's integrity record must be refused, naming the
//! file. The suite runs 1500 cases of a fixed seed; `cargo xtask fuzz` runs more
//! (`EMBER_FUZZ_CASES`, `EMBER_FUZZ_SEED`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::nn::{Linear, LinearConfig};
use burn_flex::{Flex, FlexDevice};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use super::header::crc32;
use super::integrity::{MAX_COUNT, MAX_WORLD};
use super::*;

const PATH: &str = "fuzzed.ckpt";

/// A checkpoint of a linear layer with two optimizer state tensors, a callback's tensor and
/// three sections.
fn original() -> Vec<u8> {
    let layer: Linear<Flex> = LinearConfig::new(3, 2).init(&FlexDevice);
    let weights = super::weights_of(&layer).unwrap();
    let moment = |n: usize| TensorData::new(vec![0.25f32; n], [n]);
    let extra = ExtraTensors {
        optimizer_state: vec![
            ("1.moment_1".into(), moment(6)),
            ("1.moment_2".into(), moment(6)),
        ],
        callbacks: BTreeMap::from([(
            "EMAWeightAveraging".into(),
            BTreeMap::from([("weight".into(), moment(6))]),
        )]),
    };
    let progress = Progress {
        epoch: 3,
        global_step: 120,
        batches_done: 7,
        world_size: 2,
        learning_rate: 1e-3,
        seed: 42,
        ..Progress::default()
    };
    let sections = vec![
        ("scheduler".into(), vec![1, 2, 3, 4]),
        (
            "callbacks".into(),
            br#"{"EarlyStopping":{"wait":1}}"#.to_vec(),
        ),
        ("optimizer_state".into(), br#"{"kind":"adam"}"#.to_vec()),
    ];
    let metrics = BTreeMap::from([("val_loss".into(), 0.5)]);
    Checkpoint::encode_with_state(progress, metrics, weights, extra, sections).unwrap()
}

/// The safetensors header as JSON and the tensor data after it.
fn split(bytes: &[u8]) -> (Value, Vec<u8>) {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    (header, bytes[8 + len..].to_vec())
}

/// A safetensors file of `header` and `data` (the header padded to 8 bytes, as writers do).
fn join(header: &Value, data: &[u8]) -> Vec<u8> {
    let mut json = serde_json::to_vec(header).unwrap();
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    out.extend(data);
    out
}

/// `bytes` with its ember header edited by `edit` and the header's checksum recomputed: a
/// consistent edit, which only the header's own rules can catch.
fn edit_ember_header(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let (mut header, data) = split(bytes);
    let metadata = &mut header["__metadata__"];
    let mut ember: Value = serde_json::from_str(metadata[HEADER_KEY].as_str().unwrap()).unwrap();
    edit(&mut ember);
    let json = ember.to_string();
    metadata[HEADER_CRC_KEY] = json!(crc32(json.as_bytes()).to_string());
    metadata[HEADER_KEY] = json!(json);
    join(&header, &data)
}

/// The header lists that name tensors.
const LISTS: [&str; 4] = ["weights", "optimizer_state", "callback_tensors", "sections"];

/// An edit of the ember header that breaks its integrity record, and what it did.
fn breaking_edit(rng: &mut StdRng, bytes: &[u8]) -> (Vec<u8>, String) {
    let list = LISTS[rng.random_range(0..LISTS.len())];
    match rng.random_range(0..5) {
        0 => {
            let mutated = edit_ember_header(bytes, |h| {
                let entries = h[list].as_array_mut().unwrap();
                let at = rng.random_range(0..entries.len());
                entries.remove(at);
            });
            (mutated, format!("an entry of {list} dropped"))
        }
        1 => {
            let mutated = edit_ember_header(bytes, |h| {
                let entries = h[list].as_array_mut().unwrap();
                let copy = entries[rng.random_range(0..entries.len())].clone();
                entries.insert(rng.random_range(0..=entries.len()), copy);
            });
            (mutated, format!("an entry of {list} listed twice"))
        }
        2 => {
            let counter = ["epoch", "global_step", "batches_done"][rng.random_range(0..3)];
            let value = rng.random_range(MAX_COUNT + 1..=u64::MAX);
            let mutated = edit_ember_header(bytes, |h| h[counter] = json!(value));
            (mutated, format!("{counter} {value}"))
        }
        3 => {
            let value = rng.random_range(MAX_WORLD + 1..=u64::MAX);
            let mutated = edit_ember_header(bytes, |h| h["world_size"] = json!(value));
            (mutated, format!("world_size {value}"))
        }
        _ => {
            let version =
                ["", "latest", "1.2", "v0.1.0", "0.1.0.0", "x.y.z"][rng.random_range(0..6)];
            let mutated = edit_ember_header(bytes, |h| h["ember_version"] = json!(version));
            (mutated, format!("ember_version `{version}`"))
        }
    }
}

/// Any other mutation: the reader may accept or refuse it, but must not panic.
fn other_mutation(rng: &mut StdRng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    match rng.random_range(0..5) {
        0 => {
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..out.len());
                out[at] ^= 1 << rng.random_range(0..8);
            }
        }
        1 => out.truncate(rng.random_range(0..out.len())),
        2 => {
            let len: u64 = match rng.random_range(0..3) {
                0 => rng.random(),
                1 => rng.random_range(0..out.len() as u64 * 2),
                _ => u64::from_le_bytes(out[..8].try_into().unwrap()) ^ 1,
            };
            out[..8].copy_from_slice(&len.to_le_bytes());
        }
        3 => {
            let (mut header, data) = split(bytes);
            let names: Vec<String> = (header.as_object().unwrap().keys())
                .filter(|k| *k != "__metadata__")
                .cloned()
                .collect();
            let entry = &mut header[&names[rng.random_range(0..names.len())]];
            match rng.random_range(0..3) {
                0 => {
                    entry["dtype"] = json!(
                        ["F32", "F64", "BF16", "U8", "I64", "BOOL", "F8_E4M3"]
                            [rng.random_range(0..7)]
                    )
                }
                1 => {
                    entry["shape"] = json!(
                        (0..rng.random_range(0..4))
                            .map(|_| rng.random_range(0..9u64))
                            .collect::<Vec<_>>()
                    )
                }
                _ => {
                    entry["data_offsets"] = json!([
                        rng.random_range(0..data.len() as u64 + 9),
                        rng.random_range(0..data.len() as u64 + 9)
                    ])
                }
            }
            out = join(&header, &data);
        }
        _ => {
            let key = [
                "epoch",
                "global_step",
                "world_size",
                "learning_rate",
                "weights",
                "sections",
                "metrics",
                "format_version",
                "seed",
            ][rng.random_range(0..9)];
            let value = [
                json!(null),
                json!(-1),
                json!(1.5),
                json!("x"),
                json!([]),
                json!([["a", 1, 2]]),
                json!({}),
                json!(u64::MAX),
            ][rng.random_range(0..8)]
            .clone();
            out = edit_ember_header(bytes, |h| h[key] = value);
        }
    }
    out
}

/// Runs `cases` mutations from `seed`; panics naming the first case a reader panicked on or
/// accepted although its integrity record was broken.
fn run(cases: usize, seed: u64) {
    let bytes = original();
    let path = Path::new(PATH);
    Checkpoint::decode(&bytes, path).expect("the original reads");
    let mut rng = StdRng::seed_from_u64(seed);
    for case in 0..cases {
        let breaking = rng.random_bool(0.4);
        let (mutated, what) = match breaking {
            true => breaking_edit(&mut rng, &bytes),
            false => (other_mutation(&mut rng, &bytes), String::new()),
        };
        let read = catch_unwind(AssertUnwindSafe(|| {
            let checkpoint = Checkpoint::decode(&mutated, path)?;
            let layer: Linear<Flex> = LinearConfig::new(3, 2).init(&FlexDevice);
            checkpoint.load_model(layer, path).map(drop)
        }));
        let Ok(result) = read else {
            panic!("case {case} of seed {seed} panicked the reader");
        };
        if breaking {
            let e = result.err().unwrap_or_else(|| {
                panic!("case {case} of seed {seed} ({what}) was read as a checkpoint")
            });
            assert!(e.to_string().contains(PATH), "case {case}: {e}");
        }
    }
}

/// `EMBER_FUZZ_CASES` and `EMBER_FUZZ_SEED` where `cargo xtask fuzz` sets them, else the
/// suite's fixed seed.
#[test]
fn mutated_checkpoints_never_panic_and_broken_records_are_refused() {
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    run(
        number("EMBER_FUZZ_CASES", 1500) as usize,
        number("EMBER_FUZZ_SEED", 20261128),
    );
}
