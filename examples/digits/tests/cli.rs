//! End to end through the built `digits` binary: plans, exit codes, messages, and a short fit.

use std::process::{Command, Output};

use ember_acceptance::process::signal_at_line;
use ember_acceptance::reported;

/// Runs `digits` in an empty directory. Unless `env` says otherwise the machine is planned as
/// CPU-only (`EMBER_INVENTORY=`), so the assertions hold on machines with GPUs or lavapipe too.
fn digits(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(args)
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    if !out.status.success() {
        assert!(left.is_empty(), "a failed run wrote {left:?}");
    }
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn print_plan_probes_this_machine() {
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["fit", "--print-plan", "--trainer.devices=1"])
        .env_remove("EMBER_INVENTORY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        ["cpu", "cuda", "wgpu"].contains(&plan["accelerator"].as_str().unwrap()),
        "{plan}"
    );
}

/// Probing every accelerator this binary was built with (the wgpu row builds wgpu in) prints
/// nothing that reads like an error, on a machine with no display (no `XDG_RUNTIME_DIR`) and
/// no GPU.
#[test]
fn probing_the_machine_prints_no_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["fit", "--print-plan", "--trainer.devices=1"])
        .env_remove("EMBER_INVENTORY")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("DISPLAY")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.lines().any(|l| l.contains("error")),
        "probing printed: {err}"
    );
}

#[test]
fn print_plan_with_only_a_cpu() {
    let out = digits(&["fit", "--print-plan"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["accelerator"], "cpu");
    assert_eq!(plan["strategy"], "single_device");
    assert_eq!(plan["devices"], serde_json::json!([0]));
    assert_eq!(plan["precision"], "32-true");
}

#[test]
fn bad_flags_exit_2_with_one_message_naming_flag_and_value() {
    for (args, needles) in [
        (
            &["fit", "--trainer.accelerator=invalid"][..],
            &["--trainer.accelerator", "`invalid`", "auto, gpu, cpu"][..],
        ),
        (
            &["fit", "--trainer.devices=0"],
            &["--trainer.devices", "not a valid number of devices"],
        ),
        (
            &["fit", "--trainer.devices=-1"],
            &["--trainer.devices", "an integer > 0"],
        ),
        (
            &["fit", "--trainer.num_nodes=0"],
            &["num_nodes must be a positive integer"],
        ),
        (
            &["fit", "--trainer.precision=fp8"],
            &["--trainer.precision", "bf16-mixed"],
        ),
        (
            &["fit", "--trainer.strategy=fsdp"],
            &["--trainer.strategy", "single_device, ddp"],
        ),
        (
            &["fit", "--model.depth=3"],
            &["--model.depth", "hidden, lr"],
        ),
    ] {
        let out = digits(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "one message: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}

#[test]
fn gpu_without_a_gpu_is_refused() {
    let out = digits(
        &["fit", "--trainer.accelerator=gpu", "--print-plan"],
        &[("EMBER_INVENTORY", "")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no GPU accelerator is available"));
}

#[cfg(feature = "cuda")]
#[test]
fn injected_cuda_inventory_plans_ddp_on_four_devices_and_refuses_fit() {
    let out = digits(&["fit", "--print-plan"], &[("EMBER_INVENTORY", "cuda=4")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["accelerator"], "cuda");
    assert_eq!(plan["strategy"], "ddp");
    assert_eq!(plan["devices"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(plan["cluster_environment"], "local");
    assert_eq!(plan["world_size"], 4);
    if ember::cuda::cuda_device_count() < 4 {
        let out = digits(&["fit"], &[("EMBER_INVENTORY", "cuda=4")]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            stderr(&out).contains("unset EMBER_INVENTORY to train"),
            "{}",
            stderr(&out)
        );
    }
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_plans_its_five_precisions_refuses_64_true_and_trains_them_where_a_gpu_is() {
    let cuda = "--trainer.accelerator=cuda";
    let runs = ["32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"];
    for precision in runs {
        let flag = format!("--trainer.precision={precision}");
        let out = digits(
            &["fit", cuda, &flag, "--print-plan"],
            &[("EMBER_INVENTORY", "cuda=1")],
        );
        assert!(out.status.success(), "{precision}: {}", stderr(&out));
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // 16-mixed stays 16-mixed on a GPU (loss scaling); only cpu turns it into bf16-mixed.
        assert_eq!(plan["precision"], precision);
    }
    let out = digits(
        &["fit", cuda, "--trainer.precision=64-true", "--print-plan"],
        &[("EMBER_INVENTORY", "cuda=1")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "accelerator cuda cannot run 64-true yet; it runs: 32-true, 16-true, bf16-true, 16-mixed, bf16-mixed"
        ),
        "{}",
        stderr(&out)
    );
    if ember::cuda::cuda_device_count() == 0 {
        eprintln!("skip: no CUDA device here; checked the plans only, not training on cuda");
        return;
    }
    for precision in runs {
        let dir = tempfile::tempdir().unwrap();
        let flag = format!("--trainer.precision={precision}");
        let args = ["fit", cuda, &flag, "--trainer.max_epochs=3"];
        let out = digits_on_this_machine(dir.path(), &args, &[]);
        learned_in_3_epochs(dir.path(), &out, precision, precision);
    }
}

/// Runs `digits` in `dir` with the machine's real inventory, and `env`.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
fn digits_on_this_machine(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(args)
        .current_dir(dir)
        .env_remove("EMBER_INVENTORY")
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs")
}

/// Runs `digits` in `dir` with the machine's real inventory and wgpu's software adapters.
#[cfg(feature = "wgpu")]
fn digits_on_wgpu(dir: &std::path::Path, args: &[&str]) -> Output {
    digits_on_this_machine(dir, args, &[(ember::wgpu::SOFTWARE_VAR, "1")])
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_trains_in_16_true_and_16_mixed_and_refuses_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let wgpu = "--trainer.accelerator=wgpu";
    if !digits_on_wgpu(dir.path(), &["fit", wgpu, "--print-plan"])
        .status
        .success()
    {
        eprintln!("skip: no wgpu adapter (not even lavapipe) on this machine");
        return;
    }
    for precision in ["16-true", "16-mixed"] {
        let dir = tempfile::tempdir().unwrap();
        let flag = format!("--trainer.precision={precision}");
        let out = digits_on_wgpu(dir.path(), &["fit", wgpu, &flag, "--trainer.max_epochs=3"]);
        learned_in_3_epochs(dir.path(), &out, precision, precision);
    }
    let out = digits_on_wgpu(dir.path(), &["fit", wgpu, "--trainer.precision=bf16-true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "accelerator wgpu cannot run bf16-true yet; it runs: 32-true, 16-true, 16-mixed"
        ),
        "{}",
        stderr(&out)
    );
}

#[cfg(feature = "tch")]
#[test]
fn tch_cpu_trains_in_every_precision_it_lists() {
    let tch = "--trainer.accelerator=tch-cpu";
    // 16-mixed runs as bf16-mixed on a CPU, as with the burn-flex cpu accelerator.
    let runs = [
        ("64-true", "64-true"),
        ("32-true", "32-true"),
        ("16-true", "16-true"),
        ("bf16-true", "bf16-true"),
        ("bf16-mixed", "bf16-mixed"),
        ("16-mixed", "bf16-mixed"),
    ];
    for (precision, effective) in runs {
        let dir = tempfile::tempdir().unwrap();
        let flag = format!("--trainer.precision={precision}");
        let out = digits_in(dir.path(), &["fit", tch, &flag, "--trainer.max_epochs=3"]);
        learned_in_3_epochs(dir.path(), &out, precision, effective);
    }
}

#[cfg(feature = "tch")]
#[test]
fn tch_cuda_is_planned_from_an_inventory_and_refused_without_a_gpu() {
    let out = digits(
        &[
            "fit",
            "--trainer.accelerator=gpu",
            "--trainer.precision=16-mixed",
            "--print-plan",
        ],
        &[("EMBER_INVENTORY", "tch-cuda=2")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["accelerator"], "tch-cuda", "{plan}");
    assert_eq!(
        plan["precision"], "16-mixed",
        "a GPU keeps 16-mixed: {plan}"
    );
    assert_eq!(plan["devices"].as_array().map(Vec::len), Some(2), "{plan}");

    if ember::tch::cuda_device_count() > 0 {
        eprintln!("skip: this machine has a CUDA device; the refusal is checked where none is");
        return;
    }
    let out = digits(
        &["fit", "--trainer.accelerator=tch-cuda"],
        &[("EMBER_INVENTORY", "")],
    );
    fails_with(
        &out,
        2,
        "accelerator tch-cuda is not available on this machine; available accelerators: cpu, tch-cpu",
    );
}

/// Asserts that a 3-epoch fit at `precision` succeeded, learned something (val_acc > 0.5; a
/// guess is 0.1) and recorded the precision it ran (`effective`) in its hparams.
fn learned_in_3_epochs(dir: &std::path::Path, out: &Output, precision: &str, effective: &str) {
    assert!(out.status.success(), "{precision}: {}", stderr(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let acc = reported(&stdout, "val_acc")
        .unwrap_or_else(|| panic!("{precision}: no val_acc in {stdout}"));
    assert!(
        acc > 0.5,
        "{precision} should learn something in 3 epochs: {acc}"
    );
    let hparams =
        std::fs::read_to_string(dir.join("lightning_logs/version_0/hparams.yaml")).unwrap();
    assert!(
        hparams.contains(&format!("precision: {effective}")),
        "{hparams}"
    );
}

/// Asserts that a run exited with `code` and said `needle` on stderr.
fn fails_with(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    assert!(stderr(out).contains(needle), "{}", stderr(out));
}

/// Runs `digits` in `dir` with a CPU-only inventory.
fn digits_in(dir: &std::path::Path, args: &[&str]) -> Output {
    ember_acceptance::run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir, args)
}

#[test]
fn fit_trains_logs_and_checkpoints_then_test_reads_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits_in(dir.path(), &["fit", "--trainer.max_epochs=3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", stderr(&out));
    assert!(stderr(&out).contains("epoch 3/3"), "{}", stderr(&out));
    let last = stdout.lines().last().unwrap();
    let acc = reported(last, "val_acc").unwrap_or_else(|| panic!("no val_acc in {last}"));
    assert!(acc > 0.85, "3 epochs should already reach 85%: {last}");
    let version = dir.path().join("lightning_logs/version_0");
    let csv = std::fs::read_to_string(version.join("metrics.csv")).unwrap();
    assert!(
        csv.starts_with("step,epoch,train_loss,val_acc,val_loss"),
        "{csv}"
    );
    assert!(version.join("hparams.yaml").is_file());
    let ckpt = version.join("checkpoints/epoch=2-step=69.ckpt");
    assert!(ckpt.is_file(), "{last}");

    let ckpt_flag = format!("--trainer.ckpt_path={}", ckpt.display());
    let out = digits_in(dir.path(), &["test", &ckpt_flag]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tested: f64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("test_acc "))
        .and_then(|a| a.parse().ok())
        .unwrap();
    assert!(
        (tested - acc).abs() < 1e-4,
        "test on the held-out split {tested} vs val_acc {acc}"
    );

    // A damaged copy is refused with the file and the fault named.
    let bytes = std::fs::read(&ckpt).unwrap();
    let mut flipped = bytes.clone();
    let middle = bytes.len() / 2;
    flipped[middle] ^= 0x40;
    for (name, content, needle) in [
        ("flipped.ckpt", flipped, "fails its checksum"),
        (
            "truncated.ckpt",
            bytes[..bytes.len() - 100].to_vec(),
            "is truncated",
        ),
    ] {
        std::fs::write(dir.path().join(name), content).unwrap();
        let out = digits_in(
            dir.path(),
            &["test", &format!("--trainer.ckpt_path={name}")],
        );
        // A checkpoint that cannot be read is a bad --trainer.ckpt_path: exit 2.
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(err.contains(name) && err.contains(needle), "{err}");
        assert!(err.contains("--trainer.ckpt_path"), "{err}");
    }

    let out = digits_in(dir.path(), &["predict", &ckpt_flag]);
    assert!(out.status.success(), "{}", stderr(&out));
    let predictions = String::from_utf8_lossy(&out.stdout).lines().count();
    let held_out = digits::data::Digits::shipped()
        .unwrap()
        .split(0.2, 42)
        .1
        .len();
    assert_eq!(predictions, held_out, "one line per held-out image");
}

#[test]
fn bad_checkpoints_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.ckpt"), b"not a checkpoint").unwrap();
    let out = digits_in(dir.path(), &["test", "--trainer.ckpt_path=bad.ckpt"]);
    fails_with(&out, 2, "bad.ckpt is not an ember checkpoint");
    assert!(
        stderr(&out).contains("--trainer.ckpt_path"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn deterministic_is_checked_at_plan_time() {
    let flags = ["fit", "--trainer.deterministic=true", "--print-plan"];
    let out = digits(&flags, &[("RAYON_NUM_THREADS", "2")]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--trainer.deterministic") && err.contains("RAYON_NUM_THREADS=1"),
        "{err}"
    );
    let out = digits(&flags, &[("RAYON_NUM_THREADS", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["deterministic"], true, "the plan carries the choice");
}

#[test]
fn flush_denormal_is_decided_in_the_plan() {
    for (flag, flushed) in [(None, true), (Some("false"), false), (Some("null"), true)] {
        let set = flag.map(|v| format!("--trainer.flush_denormal={v}"));
        let mut flags = vec!["fit", "--print-plan"];
        flags.extend(set.as_deref());
        let out = digits(&flags, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let expected = flushed && cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));
        assert_eq!(plan["flush_denormal"], expected, "{flag:?}");
    }
    let out = digits(&["fit", "--trainer.flush_denormal=sometimes"], &[]);
    fails_with(&out, 2, "--trainer.flush_denormal");
    assert!(
        stderr(&out).contains("true, false, or null"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn loop_flags_are_checked_before_anything_runs() {
    for (args, needles) in [
        (
            &["fit", "--trainer.limit_train_batches=1.5"][..],
            &["--trainer.limit_train_batches", "`1.5`", "fraction"][..],
        ),
        (
            &["fit", "--trainer.gradient_clip_algorithm=l1"],
            &["--trainer.gradient_clip_algorithm", "norm or value"],
        ),
        (
            &["fit", "--trainer.callbacks=[\"Swa\"]"],
            &["--trainer.callbacks", "ModelCheckpoint"],
        ),
        (
            &["fit", "--trainer.logger=wandb"],
            &["--trainer.logger", "csv"],
        ),
        (
            &["fit", "--trainer.max_steps=-2"],
            &["--trainer.max_steps", "-1"],
        ),
        (
            &[
                "fit",
                "--trainer.val_check_interval=0.5",
                "--trainer.check_val_every_n_epoch=null",
            ],
            &["--trainer.val_check_interval", "number of batches"],
        ),
        // A checkpoint that is not there, one `best` cannot find, a data module's own check,
        // and a finder that needs one process: exit 2 naming the flag, nothing written.
        (
            &["fit", "--trainer.ckpt_path=/nonexistent.ckpt"],
            &["--trainer.ckpt_path", "`/nonexistent.ckpt`", "No such file"],
        ),
        (
            &["test", "--trainer.ckpt_path=best"],
            &["--trainer.ckpt_path", "`best`", "no checkpoint in"],
        ),
        (
            &["fit", "--data.batch_size=0"],
            &["--data.batch_size", "`0`"],
        ),
        (
            &[
                "fit",
                "--trainer.batch_size_find=true",
                "--trainer.devices=2",
            ],
            &["--trainer.batch_size_find", "2 processes"],
        ),
        // Found only once the data is known (23 training batches), still exit 2 and nothing
        // written.
        (
            &["fit", "--trainer.val_check_interval=100"],
            &[
                "--trainer.val_check_interval",
                "`100`",
                "23 training batches",
            ],
        ),
    ] {
        let out = digits(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        for needle in needles {
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}

#[test]
fn every_precision_trains_on_cpu_and_16_mixed_runs_as_bf16_mixed() {
    for precision in ["bf16-true", "16-true", "bf16-mixed", "16-mixed"] {
        let dir = tempfile::tempdir().unwrap();
        let flag = format!("--trainer.precision={precision}");
        let out = digits_in(dir.path(), &["fit", &flag, "--trainer.max_epochs=3"]);
        let effective = if precision == "16-mixed" {
            "bf16-mixed"
        } else {
            precision
        };
        learned_in_3_epochs(dir.path(), &out, precision, effective);
        let warned = stderr(&out).matches("using bf16-mixed instead").count();
        assert_eq!(
            warned,
            usize::from(precision == "16-mixed"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn sigterm_and_sigusr1_stop_with_a_checkpoint_that_resumes() {
    for signal in ["TERM", "USR1"] {
        let dir = tempfile::tempdir().unwrap();
        let mut digits = Command::new(env!("CARGO_BIN_EXE_digits"));
        digits
            .args(["fit", "--trainer.max_epochs=100000"])
            .current_dir(dir.path())
            .env("EMBER_INVENTORY", "");
        let (status, rest) = signal_at_line(digits, "epoch 2/", signal);
        assert!(status.success(), "SIG{signal}: {status:?}: {rest}");
        let path = rest
            .split("checkpoint saved to ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .unwrap_or_else(|| panic!("SIG{signal}: no checkpoint message in {rest}"));
        assert!(rest.contains(&format!("received SIG{signal}")), "{rest}");
        let resume = format!("--trainer.ckpt_path={path}");
        let out = digits_in(dir.path(), &["fit", &resume, "--trainer.max_epochs=4"]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
}

/// Python's `safetensors` package (scripts/setup.sh installs it), or a skip message.
fn python_safetensors() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import safetensors, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: python3 with the safetensors and numpy packages is not installed");
    }
    ok
}

#[test]
fn python_reads_the_weights_of_a_checkpoint() {
    if !python_safetensors() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = digits_in(dir.path(), &["fit", "--trainer.max_epochs=1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ckpt = dir
        .path()
        .join("lightning_logs/version_0/checkpoints/epoch=0-step=23.ckpt");
    let script = r#"
import json, sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="numpy") as f:
    header = json.loads(f.metadata()["ember.header"])
    for name in sorted(f.keys()):
        t = f.get_tensor(name)
        print(name, t.dtype, list(t.shape))
    print("step", header["global_step"], "epoch", header["epoch"], "format", header["format_version"])
    print("val_acc", header["metrics"]["val_acc"])
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&ckpt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    let optimizer = lines
        .iter()
        .find(|l| l.starts_with("__ember__.optimizer_state uint8 "));
    // Adam's moments: tensors of their own, in the parameters' shapes and dtype.
    let moments = lines
        .iter()
        .filter(|l| l.starts_with("__optimizer__.") && l.contains(".moment_"))
        .count();
    assert_eq!(moments, 12, "two moments per parameter: {text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("__optimizer__.") && l.ends_with(".moment_2 float32 [64, 256]")),
        "{text}"
    );
    let scheduler = lines
        .iter()
        .find(|l| l.starts_with("__ember__.scheduler uint8 "));
    assert!(optimizer.is_some() && scheduler.is_some(), "{text}");
    let weights: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("mlp."))
        .collect();
    assert_eq!(
        weights,
        [
            "mlp.hidden.0.bias float32 [256]",
            "mlp.hidden.0.weight float32 [64, 256]",
            "mlp.hidden.1.bias float32 [256]",
            "mlp.hidden.1.weight float32 [256, 256]",
            "mlp.output.bias float32 [10]",
            "mlp.output.weight float32 [256, 10]",
        ]
    );
    assert!(text.contains("step 23 epoch 0 format 3"), "{text}");
    let val_acc = lines
        .iter()
        .find_map(|l| l.strip_prefix("val_acc "))
        .unwrap();
    assert!(val_acc.parse::<f64>().unwrap() > 0.5, "{text}");
}

/// LightningCLI users write lists as YAML flow sequences on the command line.
#[test]
fn a_yaml_flow_list_of_callbacks_is_read_as_a_list() {
    let out = digits(
        &[
            "fit",
            "--print-config",
            "--trainer.callbacks=[LearningRateMonitor, {class_path: EarlyStopping, init_args: {monitor: val_loss}}]",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let config: serde_json::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    let callbacks = &config["trainer"]["callbacks"];
    assert_eq!(callbacks[0], "LearningRateMonitor", "{callbacks}");
    assert_eq!(
        callbacks[1]["init_args"]["monitor"], "val_loss",
        "{callbacks}"
    );
}

/// Whether a PJRT plugin is there for the xla tests; says why a test skips when not.
#[cfg(feature = "tpu-xla")]
fn xla_available() -> bool {
    use ember::Accelerator;
    let found = ember::xla::XlaAccelerator::is_available();
    if !found {
        eprintln!("skip: no PJRT plugin (scripts/setup.sh caches XLA's CPU plugin)");
    }
    found
}

/// `digits fit --trainer.accelerator=xla ARGS` (XLA's CPU plugin here): its summary line, or
/// `None` (saying why) where the plugin is missing.
#[cfg(feature = "tpu-xla")]
fn fit_on_xla(args: &[&str]) -> Option<String> {
    if !xla_available() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args([
            "fit",
            "--trainer.accelerator=xla",
            "--trainer.enable_progress_bar=false",
        ])
        .args(args)
        .current_dir(dir.path())
        .env_remove("EMBER_INVENTORY")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // The plugin's absl banner and INFO line, written when a client is asked for a device
    // count, stay off the terminal.
    assert!(!stderr(&out).contains("absl"), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out);
    let line = text.lines().find(|l| l.starts_with("trained "));
    Some(line.expect("a summary line").to_owned())
}

/// The `val_acc` of a summary line.
#[cfg(feature = "tpu-xla")]
fn val_acc(line: &str) -> f64 {
    line.split("val_acc ")
        .nth(1)
        .and_then(|s| s.split(';').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no val_acc in {line}"))
}

/// On one xla device, digits trains to the same accuracy band as on cpu.
#[cfg(feature = "tpu-xla")]
#[test]
fn fit_on_xla_reaches_95_percent() {
    let Some(line) = fit_on_xla(&[]) else { return };
    assert!(line.contains("on xla;"), "{line}");
    assert!(val_acc(&line) >= 0.95, "{line}");
}

/// Under the `xla` strategy one process drives the plugin's 4 devices (each a 64-item share of
/// every step's batch of 256) and trains to the same band.
#[cfg(feature = "tpu-xla")]
#[test]
fn fit_with_the_xla_strategy_on_four_devices_reaches_95_percent() {
    let args = ["--trainer.strategy=xla", "--trainer.devices=4"];
    let Some(line) = fit_on_xla(&args) else {
        return;
    };
    assert!(line.contains("on xla (4 devices, one process);"), "{line}");
    assert!(
        line.contains(" 180 steps"),
        "30 epochs of 6 batches of 256: {line}"
    );
    assert!(val_acc(&line) >= 0.95, "{line}");
}

/// The `xla` strategy over several hosts is refused when the plan is made (exit 2), naming the
/// flag and what is missing, before any process joins.
#[cfg(feature = "tpu-xla")]
#[test]
fn the_xla_strategy_over_several_hosts_is_refused_with_what_is_missing() {
    if !xla_available() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_digits"))
        .args(["fit", "--trainer.accelerator=xla", "--trainer.strategy=xla"])
        .args([
            "--trainer.devices=4",
            "--trainer.num_nodes=2",
            "--print-plan",
        ])
        .env_remove("EMBER_INVENTORY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--trainer.strategy value `xla`"), "{err}");
    assert!(
        err.contains("several hosts") && err.contains("ddp"),
        "{err}"
    );
}

/// `test` of a checkpoint under the `xla` strategy on the plugin's 4 devices reports what one
/// device reports: the same items, their loss and accuracy reduced inside the program.
#[cfg(feature = "tpu-xla")]
#[test]
fn testing_on_four_devices_as_one_reports_what_one_device_reports() {
    if !xla_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_digits"))
            .args(args)
            .args([
                "--trainer.accelerator=xla",
                "--trainer.enable_progress_bar=false",
            ])
            .current_dir(dir.path())
            .env_remove("EMBER_INVENTORY")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let fit = run(&["fit", "--trainer.max_epochs=2"]);
    let checkpoint = fit.rsplit("; checkpoint ").next().unwrap().trim();
    let checkpoint = format!("--trainer.ckpt_path={checkpoint}");
    let metrics = |stdout: &str| -> Vec<(String, f64)> {
        (stdout.lines())
            .filter_map(|l| l.split_once(' '))
            .filter(|(name, _)| name.starts_with("test_"))
            .map(|(name, value)| (name.to_owned(), value.trim().parse().unwrap()))
            .collect()
    };
    let one = metrics(&run(&["test", &checkpoint]));
    let four = metrics(&run(&[
        "test",
        &checkpoint,
        "--trainer.strategy=xla",
        "--trainer.devices=4",
    ]));
    assert_eq!(one.len(), 2, "test_acc and test_loss: {one:?}");
    for ((name, a), (other, b)) in one.iter().zip(&four) {
        assert_eq!(name, other);
        // Printed to 4 decimals; the sums are reassociated over the devices.
        assert!((a - b).abs() <= 2e-4, "{name}: one device {a}, four {b}");
    }
}

#[test]
fn a_bad_shared_memory_switch_exits_2_naming_it() {
    if !ember_acceptance::mpirun_available() {
        return;
    }
    let args = ["fit", "--trainer.devices=2", "--trainer.max_steps=1"];
    let out = digits(&args, &[("EMBER_MPI_SHARED_MEMORY", "off")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid EMBER_MPI_SHARED_MEMORY value `off`: 0 turns"),
        "{stderr}"
    );
}
