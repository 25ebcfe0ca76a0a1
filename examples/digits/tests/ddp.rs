//! Data-parallel runs of the digits binary on OpenMPI (cpu ranks on this machine).
//!
//! ACCEPTANCE 28: ddp with N ranks gives the weights of one process accumulating the same N
//! shards in rank order — bitwise for N = 2, within a documented tolerance for N = 4 — and the
//! replicas end bitwise equal (the Trainer checks that itself at the end of `fit`).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use digits::model::{DigitsModel, Mlp, ModelConfig};
use digits::train::{DataConfig, train_shards_by_hand};
use ember::checkpoint::Checkpoint;
use ember_acceptance::mpirun_available;
use ember_acceptance::process::{alive_after, ranks_of};
use ember_acceptance::resume::flex_generator_turn;

type B = Autodiff<Flex>;

fn digits(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(args)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every float parameter's values, in module order.
struct Values(Vec<Vec<f32>>);

impl<B: Backend> ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0
            .push(param.val().into_data().to_vec::<f32>().unwrap());
    }
}

fn values<B: Backend>(model: &Mlp<B>) -> Vec<Vec<f32>> {
    let mut visitor = Values(Vec::new());
    model.visit(&mut visitor);
    visitor.0
}

/// The one checkpoint a run wrote.
fn checkpoint(dir: &Path) -> PathBuf {
    let ckpts = dir.join("lightning_logs/version_0/checkpoints");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ckpts)
        .unwrap_or_else(|e| panic!("{}: {e}", ckpts.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

fn weights_of(path: &Path) -> Vec<Vec<f32>> {
    weights_of_model(path, &ModelConfig::default())
}

/// The weights of a checkpoint of `config`'s model.
fn weights_of_model(path: &Path, config: &ModelConfig) -> Vec<Vec<f32>> {
    let _turn = flex_generator_turn();
    let bytes = std::fs::read(path).unwrap();
    let device = FlexDevice;
    let model = DigitsModel::<Flex>::new(config, &device);
    let model = Checkpoint::decode(&bytes, path)
        .unwrap()
        .load_model::<Flex, _>(model, path)
        .unwrap();
    values(&model.mlp)
}

/// Trains `epochs` epochs with `world` ddp ranks on `accelerator`; returns rank 0's final
/// weights.
fn ddp_weights(accelerator: &str, world: usize, epochs: usize) -> Vec<Vec<f32>> {
    ddp_weights_with(accelerator, world, epochs, &ModelConfig::default(), &[])
}

/// [`ddp_weights`] of `model`'s MLP, with more flags.
fn ddp_weights_with(
    accelerator: &str,
    world: usize,
    epochs: usize,
    model: &ModelConfig,
    extra: &[&str],
) -> Vec<Vec<f32>> {
    let dir = tempfile::tempdir().unwrap();
    let accelerator = format!("--trainer.accelerator={accelerator}");
    let devices = format!("--trainer.devices={world}");
    let max_epochs = format!("--trainer.max_epochs={epochs}");
    let hidden = format!("--model.hidden={:?}", model.hidden);
    let out = digits(
        dir.path(),
        &[
            "fit",
            &accelerator,
            "--trainer.strategy=ddp",
            &devices,
            &max_epochs,
            &hidden,
            "--trainer.seed=42",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.enable_progress_bar=false",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    weights_of_model(&checkpoint(dir.path()), model)
}

#[test]
fn ddp_ranks_with_data_workers_end_with_the_weights_of_ranks_without() {
    if !mpirun_available() {
        return;
    }
    let with = ddp_weights_with(
        "cpu",
        2,
        1,
        &ModelConfig::default(),
        &["--data.num_workers=2"],
    );
    assert!(
        with == ddp_weights("cpu", 2, 1),
        "each rank's workers made other batches"
    );
}

#[test]
fn ddp_gives_the_weights_of_one_rank_accumulating_the_shards() {
    if !mpirun_available() {
        return;
    }
    let epochs = 2;
    let reference = |world| accumulated_shards(&ModelConfig::default(), world, epochs);
    let (ddp, by_hand) = (ddp_weights("cpu", 2, epochs), reference(2));
    assert_eq!(ddp.len(), 6, "three layers, weight and bias each");
    assert!(
        ddp == by_hand,
        "2 ranks differ from one process accumulating their shards"
    );

    // With 4 ranks MPI sums the gradients in its own tree order ((g0 + g1) + (g2 + g3)), not
    // the accumulation's ((g0 + g1) + g2) + g3, so the weights agree to rounding only.
    let (ddp, by_hand) = (ddp_weights("cpu", 4, epochs), reference(4));
    let worst = ddp
        .iter()
        .flatten()
        .zip(by_hand.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "4 ranks differ by up to {worst}");
}

/// The weights of one process training `epochs` epochs of `model`, accumulating the shards of
/// `world` ranks in rank order.
fn accumulated_shards(model: &ModelConfig, world: usize, epochs: usize) -> Vec<Vec<f32>> {
    let _turn = flex_generator_turn();
    let model =
        train_shards_by_hand::<B>(&FlexDevice, model, &DataConfig::default(), epochs, world)
            .unwrap();
    values(&model)
}

#[test]
fn ddp_averaging_megabyte_gradients_in_their_own_buffers_gives_the_same_weights() {
    if !mpirun_available() {
        return;
    }
    // A 512x512 weight's gradient is 1 MiB: all-reduced where it lies, not through a bucket.
    let model = ModelConfig {
        hidden: vec![512, 512],
        ..ModelConfig::default()
    };
    let ddp = ddp_weights_with("cpu", 2, 1, &model, &[]);
    assert!(
        ddp == accumulated_shards(&model, 2, 1),
        "2 ranks differ from one process accumulating their shards"
    );
}

#[cfg(feature = "tch")]
#[test]
fn ddp_on_libtorch_gives_the_weights_of_one_rank_accumulating_the_shards() {
    use ember::Accelerator;
    use ember::tch::TchCpuAccelerator;
    if !mpirun_available() {
        return;
    }
    let epochs = 2;
    let device = TchCpuAccelerator::parallel_devices(&[0]).remove(0);
    let by_hand = train_shards_by_hand::<<TchCpuAccelerator as Accelerator>::Backend>(
        &device,
        &ModelConfig::default(),
        &DataConfig::default(),
        epochs,
        2,
    )
    .unwrap();
    let ddp = ddp_weights("tch-cpu", 2, epochs);
    assert_eq!(ddp.len(), 6, "three layers, weight and bias each");
    assert!(
        ddp == values(&by_hand),
        "2 LibTorch ranks differ from one LibTorch process accumulating their shards"
    );
}

#[test]
fn two_local_ranks_train_to_the_accuracy_of_one_process() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = digits(
        dir.path(),
        &["fit", "--trainer.devices=2", "--trainer.max_epochs=20"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        stdout.matches("trained ").count(),
        1,
        "rank 0 reports: {stdout}"
    );
    let val_acc: f64 = stdout
        .rsplit("val_acc ")
        .next()
        .and_then(|s| s.split(';').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no val_acc in {stdout}"));
    assert!(val_acc >= 0.95, "val_acc {val_acc}");
    let versions = std::fs::read_dir(dir.path().join("lightning_logs")).unwrap();
    assert_eq!(versions.count(), 1, "only rank 0 writes logs");
}

#[test]
fn predict_under_ddp_shards_the_batches_and_rank_0_prints_them_in_order() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fit = digits(dir.path(), &["fit", "--trainer.max_epochs=2"]);
    assert!(fit.status.success(), "{}", text(&fit.stderr));
    let ckpt = format!("--trainer.ckpt_path={}", checkpoint(dir.path()).display());
    let one = digits(dir.path(), &["predict", &ckpt, "--trainer.logger=false"]);
    assert!(one.status.success(), "{}", text(&one.stderr));
    let two = digits(
        dir.path(),
        &[
            "predict",
            &ckpt,
            "--trainer.logger=false",
            "--trainer.devices=2",
        ],
    );
    assert!(two.status.success(), "{}", text(&two.stderr));
    let (one, two) = (text(&one.stdout), text(&two.stdout));
    assert!(one.lines().count() > 100, "{one}");
    assert_eq!(
        two, one,
        "2 ranks print the predictions of one process, once, in order"
    );
    // The same under a PredictionWriter with return_predictions off: nothing printed, each
    // rank's file holds its contiguous share, and the files in rank order hold every item.
    let writer =
        "--trainer.callbacks=[{class_path: PredictionWriter, init_args: {output_dir: preds}}]";
    let written = digits(
        dir.path(),
        &[
            "predict",
            &ckpt,
            "--trainer.logger=false",
            "--trainer.devices=2",
            "--trainer.return_predictions=false",
            writer,
        ],
    );
    assert!(written.status.success(), "{}", text(&written.stderr));
    assert_eq!(text(&written.stdout), "", "nothing is returned to print");
    let mut items = Vec::new();
    let mut batch_idx = 0;
    for rank in 0..2 {
        let file = dir
            .path()
            .join(format!("preds/predictions-rank{rank}.jsonl"));
        let lines = std::fs::read_to_string(&file).unwrap();
        assert!(lines.lines().count() > 1, "rank {rank} predicts a share");
        for line in lines.lines() {
            let batch: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                batch["batch_idx"], batch_idx,
                "batches follow on across ranks"
            );
            batch_idx += 1;
            items.extend(batch["prediction"].as_array().unwrap().clone());
        }
    }
    let printed: Vec<serde_json::Value> = (one.lines())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(items, printed, "the files hold what one process prints");
}

#[test]
fn ranks_started_by_mpirun_find_the_mpi_environment() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // OpenMPI's session files apart from other tests' mpirun (it races creating a shared one).
    let session = tempfile::tempdir().unwrap();
    // `mpirun -np 2 digits fit --trainer.devices=1 --trainer.num_nodes=2 ARGS`.
    let mpirun = |args: &[&str]| {
        Command::new("mpirun")
            .args(["--oversubscribe", "-np", "2", env!("CARGO_BIN_EXE_digits")])
            .args(["fit", "--trainer.devices=1", "--trainer.num_nodes=2"])
            .args(args)
            .current_dir(dir.path())
            .env("TMPDIR", session.path())
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("EMBER_INVENTORY", "")
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .unwrap()
    };
    let mut ranks: Vec<(u64, String)> = printed_plans(&mpirun(&["--print-plan"]))
        .into_iter()
        .map(|plan| {
            assert_eq!(plan["world_size"], 2);
            assert_eq!(plan["strategy"], "ddp");
            (
                plan["global_rank"].as_u64().unwrap(),
                plan["cluster_environment"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, [(0, "mpi".to_owned()), (1, "mpi".to_owned())]);

    trained_3_epochs_once(&mpirun(&["--trainer.max_epochs=3"]));
}

/// Asserts that a 2-rank, 3-epoch digits run succeeded and reported once (rank 0): 36 steps.
fn trained_3_epochs_once(out: &Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("trained 36 steps").count(), 1, "{stdout}");
}

/// A 2-rank digits run under the local launcher that trains until stopped, once both ranks
/// train: the launcher and the ranks' pids by rank.
// The child is returned to the caller, which waits for it (`wait_30s`); clippy cannot see that.
#[allow(clippy::zombie_processes)]
fn start_long_run(dir: &Path, extra: &[&str]) -> (std::process::Child, Vec<(usize, u32)>) {
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.devices=2",
            "--trainer.max_epochs=100000",
            "--trainer.enable_progress_bar=false",
        ])
        .args(extra)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // A process group of its own, as a shell gives a foreground job, so a test can signal
        // the group as a terminal's Ctrl-C does.
        .process_group(0)
        .spawn()
        .unwrap();
    // Both ranks train once rank 0 has written its first metrics.
    let started = Instant::now();
    let metrics = dir.join("lightning_logs/version_0/metrics.csv");
    loop {
        let ranks = ranks_of(launcher.id(), "digits");
        if ranks.len() == 2 && metrics.exists() {
            return (launcher, ranks);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("the ranks did not start: {ranks:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits at most 30 s for the launcher; returns its status and stderr.
fn wait_30s(mut launcher: std::process::Child, what: &str) -> (std::process::ExitStatus, String) {
    let since = Instant::now();
    let status = loop {
        if let Some(status) = launcher.try_wait().unwrap() {
            break status;
        }
        if since.elapsed() > Duration::from_secs(30) {
            let _ = launcher.kill();
            let _ = launcher.wait();
            panic!("the launcher was still running 30 s after {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// Sends `signal` to `target`: a pid, or a process group as `-PGID`.
fn signal(target: impl std::fmt::Display, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, "--", &target.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

#[test]
fn killing_one_rank_ends_the_run_with_a_message_naming_it() {
    if !mpirun_available() {
        return;
    }
    for strategy in ["ddp", "ddp_sharded"] {
        let dir = tempfile::tempdir().unwrap();
        let flag = format!("--trainer.strategy={strategy}");
        let (launcher, ranks) = start_long_run(dir.path(), &[&flag]);
        signal(ranks[1].1, "-KILL");
        let (status, stderr) = wait_30s(launcher, "rank 1 was killed");
        assert!(
            !status.success(),
            "{strategy}: the launcher exited {status}"
        );
        let gone = !alive_after(ranks[0].1, std::time::Duration::from_secs(5));
        assert!(gone, "{strategy}: rank 0 outlived the run");
        assert!(
            stderr.contains("rank 1"),
            "{strategy}: no message names rank 1: {stderr}"
        );
    }
}

#[test]
fn a_collective_that_waits_past_the_timeout_ends_the_run() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (launcher, ranks) = start_long_run(dir.path(), &["--trainer.ddp_timeout=2"]);
    // Rank 1 stops answering without dying: rank 0 waits in its next all-reduce.
    signal(ranks[1].1, "-STOP");
    let (status, stderr) = wait_30s(launcher, "rank 1 was stopped");
    assert!(!status.success(), "the launcher exited {status}");
    let gone = !alive_after(ranks[1].1, std::time::Duration::from_secs(5));
    assert!(gone, "the stopped rank outlived the run");
    assert!(
        stderr.contains("rank 0: collective") && stderr.contains("--trainer.ddp_timeout=2"),
        "no timeout message: {stderr}"
    );
}

/// Runs `scripts/<script> digits fit ARGS`, a script that sets up a cluster on this machine
/// and exits 77 where it cannot; `None` (skipped, with the script's reason) then.
fn under_script(script: &str, dir: &Path, args: &[&str]) -> Option<Output> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let out = Command::new(script)
        .args([env!("CARGO_BIN_EXE_digits"), "fit"])
        .args(args)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .unwrap();
    if out.status.code() == Some(77) {
        eprintln!("{}", text(&out.stderr).trim());
        return None;
    }
    Some(out)
}

/// The plan every rank printed (`--print-plan`), one JSON object a line.
fn printed_plans(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs digits as 2 nodes × 1 rank in two network namespaces joined by a veth pair
/// (`scripts/test-multinode.sh`).
fn two_nodes(dir: &Path, args: &[&str]) -> Option<Output> {
    let flags = ["--trainer.devices=1", "--trainer.num_nodes=2"];
    under_script("test-multinode.sh", dir, &[&flags[..], args].concat())
}

#[test]
fn two_nodes_in_network_namespaces_train_over_tcp() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = two_nodes(dir.path(), &["--print-plan"]) else {
        return;
    };
    let mut nodes: Vec<(u64, u64)> = printed_plans(&out)
        .into_iter()
        .map(|plan| {
            assert_eq!(plan["cluster_environment"], "mpi");
            assert_eq!(plan["world_size"], 2);
            (
                plan["global_rank"].as_u64().unwrap(),
                plan["node_rank"].as_u64().unwrap(),
            )
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, [(0, 0), (1, 1)], "one rank on each node");

    // The Trainer ends fit by checking that both replicas hold bitwise the same weights.
    let out = two_nodes(
        dir.path(),
        &[
            "--trainer.max_epochs=3",
            "--trainer.enable_progress_bar=false",
        ],
    )
    .expect("the namespaces were made a moment ago");
    trained_3_epochs_once(&out);
}

/// Runs `srun --ntasks=2 --mpi=pmix digits fit --trainer.devices=2 ARGS` under a private
/// one-node SLURM cluster (`scripts/test-slurm.sh`).
fn under_slurm(dir: &Path, args: &[&str]) -> Option<Output> {
    under_script(
        "test-slurm.sh",
        dir,
        &[&["--trainer.devices=2"][..], args].concat(),
    )
}

#[test]
fn srun_ranks_find_the_slurm_environment_agree_on_the_main_address_and_train() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = under_slurm(dir.path(), &["--print-plan"]) else {
        return;
    };
    let plans = printed_plans(&out);
    assert_eq!(plans.len(), 2, "one plan per rank");
    let mut ranks: Vec<u64> = plans
        .iter()
        .map(|p| p["global_rank"].as_u64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1]);
    for plan in &plans {
        assert_eq!(plan["cluster_environment"], "slurm");
        assert_eq!(plan["world_size"], 2);
        assert_eq!(plan["main_address"], plans[0]["main_address"]);
        assert_eq!(plan["main_port"], plans[0]["main_port"]);
    }

    let out = under_slurm(
        dir.path(),
        &[
            "--trainer.max_epochs=3",
            "--trainer.enable_progress_bar=false",
        ],
    )
    .expect("the cluster started a moment ago");
    trained_3_epochs_once(&out);
}

#[test]
fn ranks_started_one_by_one_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["fit", "--trainer.devices=2"])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .envs([
            ("TORCHELASTIC_RUN_ID", "t"),
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("GROUP_RANK", "0"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("torchelastic environment") && stderr.contains("mpirun, srun"),
        "{stderr}"
    );
}

/// `(step, train_loss)` of every row of rank 0's metrics.csv that has a training loss.
fn train_losses(run: &Path) -> Vec<(u64, String)> {
    let csv = std::fs::read_to_string(run.join("lightning_logs/version_0/metrics.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name| header.iter().position(|h| *h == name).unwrap();
    let (step, loss) = (col("step"), col("train_loss"));
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|row| !row[loss].is_empty())
        .map(|row| (row[step].parse().unwrap(), row[loss].to_owned()))
        .collect()
}

#[test]
fn a_resumed_ddp_run_continues_with_the_losses_of_an_uninterrupted_one() {
    if !mpirun_available() {
        return;
    }
    let common = [
        "fit",
        "--trainer.devices=2",
        "--trainer.seed=7",
        "--trainer.log_every_n_steps=1",
        "--trainer.enable_progress_bar=false",
    ];
    let run = |dir: &Path, extra: &[&str]| {
        let out = digits(dir, &[&common[..], extra].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let whole = tempfile::tempdir().unwrap();
    run(whole.path(), &["--trainer.max_epochs=3"]);
    // Stopped at step 18: epoch 1, after 6 of its 12 batches.
    let first = tempfile::tempdir().unwrap();
    run(first.path(), &["--trainer.max_steps=18"]);
    let stopped = checkpoint(first.path());
    let resumed = tempfile::tempdir().unwrap();
    let ckpt_path = format!("--trainer.ckpt_path={}", stopped.display());
    run(resumed.path(), &["--trainer.max_epochs=3", &ckpt_path]);

    // Rows carry Lightning's step label (the steps before the one logged): the 19th step's
    // loss is at step 18.
    let expected: Vec<(u64, String)> = train_losses(whole.path())
        .into_iter()
        .filter(|(step, _)| *step >= 18)
        .collect();
    assert_eq!(expected.len(), 18);
    assert_eq!(train_losses(resumed.path()), expected);
    assert!(
        weights_of(&checkpoint(resumed.path())) == weights_of(&checkpoint(whole.path())),
        "the resumed run ends with other weights"
    );
}

#[test]
fn sigterm_to_the_launcher_stops_every_rank_with_a_checkpoint() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // With data workers: the signal also stops them, and no thread keeps a rank alive.
    let (launcher, ranks) = start_long_run(dir.path(), &["--data.num_workers=2"]);
    signal(launcher.id(), "-TERM");
    every_rank_stops_with_a_checkpoint(dir.path(), launcher, &ranks, "SIGTERM");
}

#[test]
fn ctrl_c_in_the_terminal_stops_every_rank_with_a_checkpoint() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (launcher, ranks) = start_long_run(dir.path(), &[]);
    // A terminal's Ctrl-C: SIGINT to every process of the foreground group. mpirun and the
    // ranks are in a group of their own, so only the launcher receives it and stops them
    // gracefully, as for SIGTERM.
    signal(format!("-{}", launcher.id()), "-INT");
    every_rank_stops_with_a_checkpoint(dir.path(), launcher, &ranks, "Ctrl-C");
}

#[test]
fn ranks_end_with_a_launcher_killed_outright() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut launcher, ranks) = start_long_run(dir.path(), &[]);
    let mpirun = parent_of(ranks[0].1);
    // SIGKILL gives the launcher no chance to stop anything: mpirun, outside the launcher's
    // process group, learns of its death from the kernel and ends the ranks.
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let mut pids = ranks.iter().map(|&(_, pid)| pid).chain([mpirun]);
    assert!(
        pids.all(|pid| !alive_after(pid, Duration::from_secs(20))),
        "mpirun or a rank outlived its launcher"
    );
    // The directory the launcher made for mpirun's session files, which it had no chance to
    // remove.
    let session = std::env::temp_dir().join(format!("ember-mpirun-{}", launcher.id()));
    let _ = std::fs::remove_dir_all(session);
}

/// The parent of process `pid`.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: the state, then the parent's pid.
    let after_name = stat.rsplit(')').next().unwrap();
    after_name
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits for a launcher sent a stop signal (`what`): it exits 0, no rank outlives it, and rank 0
/// wrote the stop checkpoint, which loads.
fn every_rank_stops_with_a_checkpoint(
    dir: &Path,
    launcher: std::process::Child,
    ranks: &[(usize, u32)],
    what: &str,
) {
    let (status, stderr) = wait_30s(launcher, what);
    assert!(status.success(), "the launcher exited {status}: {stderr}");
    assert!(
        (ranks.iter()).all(|&(_, pid)| !alive_after(pid, std::time::Duration::from_secs(5))),
        "a rank outlived the run"
    );
    assert!(
        stderr.contains("received SIGUSR1: stopped after step"),
        "{stderr}"
    );
    let stop_checkpoint = std::fs::read_dir(dir.join("lightning_logs/version_0/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("sigusr1-")
        })
        .expect("rank 0 wrote the stop checkpoint");
    assert_eq!(
        weights_of(&stop_checkpoint).len(),
        6,
        "the checkpoint loads"
    );
}
