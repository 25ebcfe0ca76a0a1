//! The transformer example end to end: a short fit learns more than the characters'
//! frequencies, `predict` continues a prompt, a fit stopped mid-epoch resumes bitwise
//! (ACCEPTANCE 29) from the text and streaming token shards, two ddp ranks train from
//! shards, and activation checkpointing keeps the results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use burn::tensor::TensorData;
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::{Trainer, TrainerOptions};
use ember_acceptance::resume::{Losses, RecordLosses, flex_generator_turn, float_bytes};
use ember_acceptance::{mpirun_available, reported, run_cpu_only};
use transformer::{CharLm, CorpusData, DataConfig, LmConfig};

/// A model small enough for a debug build: one block of width 32 over 32 characters.
const SMALL: [&str; 4] = [
    "--model.d_model=32",
    "--model.layers=1",
    "--data.context=32",
    "--model.warmup_steps=10",
];

fn transformer(dir: &Path, args: &[&str]) -> Output {
    let out = run_cpu_only(env!("CARGO_BIN_EXE_transformer"), dir, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The entropy of the shipped corpus's characters (what a model that ignores context reaches)
/// is 3.41 nats; 300 steps brought the validation loss to 3.06 when this was written.
#[test]
fn a_short_fit_learns_more_than_the_character_frequencies_and_predict_continues_a_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["fit", "--trainer.max_steps=300", "--model.decay_steps=290"];
    args.extend([
        "--model.lr=0.01",
        "--model.dropout=0",
        "--trainer.enable_progress_bar=false",
    ]);
    args.extend(SMALL);
    let out = transformer(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let val_loss = reported(&stdout, "val_loss").unwrap_or_else(|| panic!("{stdout}"));
    let val_ppl = reported(&stdout, "val_ppl").unwrap();
    assert!(val_loss < 3.2, "val_loss {val_loss}: {stdout}");
    assert!(
        (val_ppl - val_loss.exp()).abs() < 1e-2 * val_ppl,
        "{stdout}"
    );

    let mut args = vec![
        "predict",
        "--trainer.ckpt_path=last",
        "--model.sample_length=40",
    ];
    args.extend(SMALL);
    let out = transformer(dir.path(), &args);
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let text: String = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert!(text.starts_with("The Trainer "), "{text}");
    assert_eq!(text.chars().count(), "The Trainer ".len() + 40, "{text}");
}

fn small_config() -> (LmConfig, DataConfig) {
    let model = LmConfig {
        d_model: 32,
        layers: 1,
        ..LmConfig::default()
    };
    let data = DataConfig {
        context: 32,
        ..DataConfig::default()
    };
    (model, data)
}

/// 40 steps (dropout on) on `data`, recording the losses; stopped at `stop_at` with a
/// checkpoint, or resumed from `ckpt_path`.
fn run<B: AutodiffBackend>(
    device: &B::Device,
    (root, data): (&Path, &DataConfig),
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u8>>) {
    let (model, _) = small_config();
    let data = data.clone();
    let options = TrainerOptions {
        seed: Some(5),
        max_steps: Some(40),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        gradient_clip_val: Some(1.0),
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Losses::default();
    let hparams = serde_json::json!({"model": model, "data": data});
    let mut trainer = Trainer::<B>::on_device(device.clone(), options)
        .unwrap()
        .with_hparams(hparams)
        .with_callback(RecordLosses {
            seen: seen.clone(),
            stop_at,
        });
    let net = CharLm::<B>::new(&model, trainer.device());
    let out = trainer.fit(net, &mut CorpusData::new(data)).unwrap();
    let losses = seen.borrow().clone();
    (losses, float_bytes(&out.model))
}

/// A fit stopped at step 17 and resumed against one that was not stopped (taking turns with
/// burn-flex's one generator, which the other tests' fits draw from too).
fn resumes_bitwise(data: &DataConfig) {
    type B = Autodiff<Flex>;
    let _turn = flex_generator_turn();
    let dir = tempfile::tempdir().unwrap();
    let fit = |root: &Path, ckpt, stop_at| run::<B>(&FlexDevice, (root, data), ckpt, stop_at);
    let (all, weights) = fit(dir.path(), None, None);
    assert_eq!(all.len(), 40);
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = fit(dir.path(), None, Some((17, ckpt.clone())));
    let (rest, resumed_weights) = fit(dir.path(), Some(ckpt), None);
    assert_eq!(rest.first().map(|(step, _)| *step), Some(18));
    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(joined == all, "the resumed run's losses differ");
    assert!(
        resumed_weights == weights,
        "the resumed run's weights differ"
    );
}

#[test]
fn a_fit_stopped_mid_epoch_resumes_bitwise() {
    resumes_bitwise(&small_config().1);
}

/// Streamed from shards through the shuffle buffer, on 2 workers: the same fit whether it
/// stops or not, and the same with no workers.
#[test]
fn a_fit_streaming_token_shards_resumes_bitwise_and_does_not_depend_on_workers() {
    let dir = tempfile::tempdir().unwrap();
    transformer::shards::write(transformer::data::shipped(), dir.path(), 5, 0.1).unwrap();
    let data = |num_workers| DataConfig {
        shards: Some(dir.path().to_owned()),
        num_workers,
        ..small_config().1
    };
    resumes_bitwise(&data(2));
    type B = Autodiff<Flex>;
    let _turn = flex_generator_turn();
    let root = tempfile::tempdir().unwrap();
    let fit = |workers| run::<B>(&FlexDevice, (root.path(), &data(workers)), None, None);
    assert!(fit(0) == fit(2), "0 and 2 workers train differently");
}

#[test]
fn two_ddp_ranks_train_streaming_token_shards_on_workers() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    transformer::shards::write(transformer::data::shipped(), &shards, 4, 0.1).unwrap();
    let shards = format!("--data.shards={}", shards.display());
    let mut args = vec!["fit", "--trainer.devices=2", "--trainer.max_steps=60"];
    args.extend([shards.as_str(), "--data.num_workers=2"]);
    args.extend(["--model.lr=0.01", "--trainer.enable_progress_bar=false"]);
    args.extend(SMALL);
    let out = transformer(dir.path(), &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("on cpu (2 processes)"), "{stdout}");
    let val_loss = reported(&stdout, "val_loss").unwrap_or_else(|| panic!("{stdout}"));
    assert!(val_loss < 3.6, "val_loss {val_loss}: {stdout}");
}

#[test]
fn forward_macs_count_every_matrix_product_of_the_default_model() {
    let config = LmConfig::default();
    let (d, t, blocks) = (64, 64, 2);
    // Per token and block: q, k, v and output projections, scores and weighted sum over the
    // window, the MLP's two layers at 4·d; then the tied logits over 96 characters.
    let per_token = blocks * (4 * d * d + 2 * t * d + 2 * 4 * d * d) + 96 * d;
    assert_eq!(config.forward_macs(t as usize), t * per_token);
}

/// A shard cut short between two runs: the fit stops naming it (exit 1), and once it is whole
/// again the checkpoint written before resumes.
#[test]
fn a_truncated_shard_stops_the_fit_naming_it_and_the_checkpoint_before_still_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    transformer::shards::write(transformer::data::shipped(), &shards, 4, 0.1).unwrap();
    let flag = format!("--data.shards={}", shards.display());
    let args = |steps: &'static str, resume: bool| {
        let mut args = vec![
            "fit",
            flag.as_str(),
            steps,
            "--trainer.enable_progress_bar=false",
        ];
        args.extend(SMALL);
        if resume {
            args.push("--trainer.ckpt_path=last");
        }
        args
    };
    transformer(dir.path(), &args("--trainer.max_steps=5", false));

    let torn = shards.join("train/002.bin");
    let whole = std::fs::read(&torn).unwrap();
    std::fs::write(&torn, &whole[..whole.len() / 2 + 1]).unwrap();
    let exe = env!("CARGO_BIN_EXE_transformer");
    let out = run_cpu_only(exe, dir.path(), &args("--trainer.max_steps=10", true));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("002.bin") && stderr.contains("truncated"),
        "{stderr}"
    );

    std::fs::write(&torn, whole).unwrap();
    let out = transformer(dir.path(), &args("--trainer.max_steps=10", true));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("trained 5 steps"), "{stdout}");
}

/// The tensors of the newest checkpoint a fit of [`SMALL`] with two blocks (the example
/// recomputes all but the last) and `args` wrote in `dir`, in its newest log version.
fn fit_tensors(dir: &Path, args: &[&str]) -> BTreeMap<String, TensorData> {
    let mut all = vec!["fit", "--trainer.enable_progress_bar=false"];
    all.extend(SMALL);
    all.push("--model.layers=2");
    all.extend(args);
    transformer(dir, &all);
    let version = ember_acceptance::checkpoints::newest(&dir.join("lightning_logs"));
    let ckpts = version.join("checkpoints");
    ember_acceptance::checkpoints::tensors(&ember_acceptance::checkpoints::newest(&ckpts))
}

/// `--trainer.activation_checkpointing=true` recomputes each block (the example runs its blocks
/// through `ember::nn::recompute`) instead of keeping its activations: without dropout, the
/// same weights and optimizer state as keeping them, bitwise.
#[test]
fn activation_checkpointing_trains_to_the_same_bits_without_dropout() {
    let ends: Vec<_> = ["false", "true"]
        .into_iter()
        .map(|on| {
            let dir = tempfile::tempdir().unwrap();
            let flag = format!("--trainer.activation_checkpointing={on}");
            let plan = transformer(dir.path(), &["fit", &flag, "--print-plan"]);
            let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
            assert_eq!(
                plan["activation_checkpointing"].as_bool().unwrap_or(false),
                on == "true"
            );
            fit_tensors(
                dir.path(),
                &["--trainer.max_steps=6", "--model.dropout=0", &flag],
            )
        })
        .collect();
    assert!(ends[0].len() > 10, "{:?}", ends[0].keys());
    assert!(ends[0] == ends[1], "checkpointing changed the result");
}

/// With the flag on and no block marked (one block: the example leaves the last one out), the
/// fit says that nothing was recomputed.
#[test]
fn activation_checkpointing_without_a_marked_block_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["fit", "--trainer.max_steps=1"];
    args.extend(SMALL);
    args.push("--trainer.activation_checkpointing=true");
    let out = transformer(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing was recomputed"), "{stderr}");
}

/// With dropout on and activation checkpointing, a fit stopped after 5 steps and resumed to 10
/// ends where one of 10 steps does, bitwise: a recomputed block draws the masks its forward
/// pass drew, from a seed that follows the run's seed and the batch (a seed of its own, so
/// the masks, and the weights, differ from a run with the flag off).
#[test]
fn activation_checkpointing_with_dropout_resumes_bitwise() {
    let on = "--trainer.activation_checkpointing=true";
    let whole = tempfile::tempdir().unwrap();
    let ten = fit_tensors(whole.path(), &["--trainer.max_steps=10", on]);
    let off = tempfile::tempdir().unwrap();
    let ten_off = fit_tensors(off.path(), &["--trainer.max_steps=10"]);
    assert!(
        ten != ten_off,
        "the flag made no difference: was any block recomputed?"
    );
    let parts = tempfile::tempdir().unwrap();
    fit_tensors(parts.path(), &["--trainer.max_steps=5", on]);
    let resumed = fit_tensors(
        parts.path(),
        &["--trainer.max_steps=10", on, "--trainer.ckpt_path=last"],
    );
    assert!(ten.len() > 10, "{:?}", ten.keys());
    assert!(ten == resumed, "the resumed run's weights differ");
}
