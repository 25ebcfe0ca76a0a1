//! Each plugin of the example is selected by name from the command line and trains digits;
//! local SGD runs under 2 ranks; the environment's ranks show in `--print-plan`; an unknown
//! plugin name exits 2 listing the registered ones.

use std::path::Path;
use std::process::{Command, Output};

use ember_acceptance::mpirun_available;

fn app_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_custom_plugins"));
    command
        .args(args)
        .current_dir(dir)
        // CPU only, so the assertions hold on machines with GPUs or lavapipe too.
        .env("EMBER_INVENTORY", "");
    for var in [
        "JOB_ID",
        "OMPI_COMM_WORLD_SIZE",
        "SLURM_NTASKS",
        "TORCHELASTIC_RUN_ID",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `val_acc` the digits job prints at the end of a fit.
fn val_acc(out: &Output) -> f64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("trained "))
        .unwrap_or_else(|| panic!("no summary line: {}", text(out)));
    line.split("val_acc ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no val_acc in {line}"))
}

const FIT: [&str; 4] = [
    "fit",
    "--trainer.max_epochs=5",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_checkpointing=false",
];

#[test]
fn the_plugins_and_the_callback_are_listed_in_help() {
    let dir = tempfile::tempdir().unwrap();
    let out = app_in(dir.path(), &["fit", "--help"], &[]);
    assert!(out.status.success(), "{}", text(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for name in [
        "local_sgd",
        "bf16-static-scale",
        "renamed",
        "epoch_line",
        "jsonl",
    ] {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
}

#[test]
fn help_names_the_app_in_its_usage_lines_whatever_the_file_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("trainer-v2");
    std::fs::copy(env!("CARGO_BIN_EXE_custom_plugins"), &renamed).unwrap();
    for args in [&["--help"][..], &["fit", "--help"]] {
        let out = Command::new(&renamed)
            .args(args)
            .env("EMBER_INVENTORY", "")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage: custom_plugins"), "{help}");
        assert!(!help.contains("trainer-v2"), "{help}");
    }
}

#[test]
fn the_precision_plugin_selected_by_name_trains_and_logs_its_scale() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.push("--trainer.precision=bf16-static-scale");
    args.push("--trainer.log_every_n_steps=1");
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(val_acc(&out) > 0.5, "{}", text(&out));
    let metrics =
        std::fs::read_to_string(dir.path().join("lightning_logs/version_0/metrics.csv")).unwrap();
    let header = metrics.lines().next().unwrap();
    assert!(header.contains("static_loss_scale"), "{header}");
    let hparams =
        std::fs::read_to_string(dir.path().join("lightning_logs/version_0/hparams.yaml")).unwrap();
    assert!(hparams.contains("bf16-static-scale"), "{hparams}");

    let plan = app_in(
        dir.path(),
        &[
            "fit",
            "--trainer.plugins=[bf16-static-scale]",
            "--print-plan",
        ],
        &[],
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["precision"], "bf16-mixed");
    assert_eq!(plan["precision_plugin"], "bf16-static-scale");
}

#[test]
fn the_cluster_environment_is_detected_shows_its_ranks_and_trains() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("JOB_ID", "77"),
        ("JOB_WORLD", "4"),
        ("JOB_RANK", "3"),
        ("JOB_LOCAL_RANK", "1"),
        ("JOB_NODE", "1"),
        ("JOB_HOST", "node-a"),
    ];
    let out = app_in(
        dir.path(),
        &[
            "fit",
            "--trainer.devices=2",
            "--trainer.num_nodes=2",
            "--print-plan",
        ],
        &env,
    );
    assert!(out.status.success(), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["cluster_environment"], "renamed");
    assert_eq!(plan["world_size"], 4);
    assert_eq!(plan["global_rank"], 3);
    assert_eq!(plan["local_rank"], 1);
    assert_eq!(plan["node_rank"], 1);
    assert_eq!(plan["main_address"], "node-a");

    // Selected by name, in a world of one, it trains.
    let one = [("JOB_WORLD", "1"), ("JOB_RANK", "0")];
    let mut args = FIT.to_vec();
    args.push("--trainer.plugins=[renamed]");
    let out = app_in(dir.path(), &args, &one);
    assert!(out.status.success(), "{}", text(&out));
    assert!(val_acc(&out) > 0.5, "{}", text(&out));
}

#[test]
fn an_unknown_plugin_exits_2_listing_the_registered_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = app_in(dir.path(), &["fit", "--trainer.plugins=[nope]"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--trainer.plugins") && err.contains("nope"),
        "{err}"
    );
    for name in ["bf16-static-scale", "renamed", "slurm"] {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing is written"
    );
}

/// Runs a command that must be refused as a flag error: exit 2, nothing written; its stderr.
fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = app_in(dir.path(), args, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing is written"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_plugin_list_names_each_choice_once() {
    let err = refused(&["fit", "--trainer.plugins=[nope]"]);
    assert_eq!(err.matches("mpi").count(), 1, "{err}");
    assert!(err.contains("process group backends: mpi"), "{err}");
}

#[test]
fn a_mistyped_precision_lists_the_registered_precision_plugin() {
    let err = refused(&["fit", "--trainer.precision=bf16-static"]);
    assert!(err.contains("--trainer.precision"), "{err}");
    assert!(err.contains("bf16-mixed"), "{err}");
    assert!(err.contains("bf16-static-scale"), "{err}");
}

#[test]
fn a_plugin_named_twice_is_refused() {
    for twice in [
        "[renamed, renamed]",
        "[bf16-static-scale,BF16-static-scale]",
        "[mpi,mpi]",
    ] {
        let err = refused(&["fit", &format!("--trainer.plugins={twice}")]);
        assert!(
            err.contains("--trainer.plugins") && err.contains("named twice"),
            "{twice}: {err}"
        );
    }
}

#[test]
fn local_sgd_on_one_process_is_refused_while_planning() {
    let err = refused(&["fit", "--trainer.strategy=local_sgd", "--print-plan"]);
    assert!(
        err.contains("--trainer.strategy") && err.contains("local_sgd"),
        "{err}"
    );
    assert!(err.contains("--trainer.devices=2"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "fit",
        "--trainer.strategy=local_sgd",
        "--trainer.devices=2",
        "--print-plan",
    ];
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
}

/// Issue 32.8: a callback registered by name is selected from the command line, by name or
/// as a `{class_path, init_args}` table; bad `init_args` and unknown names exit 2.
#[test]
fn a_registered_callback_is_selected_by_name_with_its_init_args() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend(["--trainer.max_epochs=2", "--trainer.callbacks=[EpochLine]"]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("epoch_line:"))
        .collect();
    assert_eq!(
        lines,
        ["epoch_line: epoch 0 step 23", "epoch_line: epoch 1 step 46"]
    );

    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend([
        "--trainer.max_epochs=1",
        "--trainer.callbacks=[{class_path: epoch_line, init_args: {metrics: [train_loss, nope]}}]",
    ]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("epoch_line:"))
        .unwrap();
    let loss = line
        .split(" train_loss ")
        .nth(1)
        .and_then(|r| r.split(' ').next());
    assert!(loss.is_some_and(|l| l.parse::<f64>().is_ok()), "{line}");
    assert!(line.ends_with(" nope -"), "{line}");

    let err = refused(&[
        "fit",
        "--trainer.callbacks=[{class_path: EpochLine, init_args: {metric: x}}]",
    ]);
    assert!(
        err.contains("--trainer.callbacks") && err.contains("metric"),
        "{err}"
    );
    let err = refused(&["fit", "--trainer.callbacks=[EpochLines]"]);
    assert!(
        err.contains("known: ") && err.contains("epoch_line"),
        "{err}"
    );
}

/// Issue 32.8: a logger registered by name is selected with `--trainer.logger`, beside csv;
/// an unknown name exits 2 listing the registered ones.
#[test]
fn a_registered_logger_is_selected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend(["--trainer.max_epochs=1", "--trainer.logger=[csv, jsonl]"]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let version = dir.path().join("lightning_logs/version_0");
    assert!(version.join("metrics.csv").exists());
    let lines = std::fs::read_to_string(version.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert!(last["metrics"]["val_acc"].is_number(), "{lines}");

    let err = refused(&["fit", "--trainer.logger=jsonx"]);
    assert!(
        err.contains("--trainer.logger") && err.contains("allowed: ") && err.contains("jsonl"),
        "{err}"
    );
}

#[test]
fn local_sgd_selected_by_name_trains_under_two_ranks() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend(["--trainer.strategy=local_sgd", "--trainer.devices=2"]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    // One summary (rank 0 speaks for the run); the replica check at the end of fit passed.
    let summaries = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("trained "))
        .count();
    assert_eq!(summaries, 1, "{}", text(&out));
    assert!(val_acc(&out) > 0.5, "{}", text(&out));
    let hparams =
        std::fs::read_to_string(dir.path().join("lightning_logs/version_0/hparams.yaml")).unwrap();
    assert!(hparams.contains("local_sgd"), "{hparams}");
}

/// The rows of a metrics.csv as maps from column to value (empty cells left out).
fn csv_rows(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|line| {
            (header.iter().zip(line.split(',')))
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_owned()))
                .collect()
        })
        .collect()
}

#[test]
fn a_strategy_a_precision_plugin_and_a_callback_log_through_the_trainer() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend([
        "--trainer.strategy=local_sgd",
        "--trainer.devices=2",
        "--trainer.precision=bf16-static-scale",
        "--trainer.callbacks=[weight_norm]",
        "--trainer.log_every_n_steps=1",
    ]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = csv_rows(&dir.path().join("lightning_logs/version_0/metrics.csv"));
    // The callback's value: once per epoch, in a row with the epoch.
    let norms: Vec<_> = rows
        .iter()
        .filter(|r| r.contains_key("weight_norm"))
        .collect();
    assert_eq!(norms.len(), 5, "{rows:?}");
    for (epoch, row) in norms.iter().enumerate() {
        assert_eq!(row["epoch"], epoch.to_string(), "{row:?}");
        assert!(row["weight_norm"].parse::<f64>().unwrap() > 0.0, "{row:?}");
    }
    // The strategy's and the precision plugin's: every step, with the epoch, as integers.
    let averages: Vec<u64> = rows
        .iter()
        .filter(|r| r.contains_key("local_sgd_averages"))
        .map(|r| {
            assert!(
                r.contains_key("epoch") && r.contains_key("static_skipped"),
                "{r:?}"
            );
            r["local_sgd_averages"].parse().expect("an integer")
        })
        .collect();
    assert!(averages.len() >= 20, "{averages:?}");
    assert!(averages.windows(2).all(|w| w[0] <= w[1]) && averages[averages.len() - 1] > 0);
    // People see counters as whole numbers.
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("static_skipped 0") && !summary.contains("static_skipped 0.0000"),
        "{summary}"
    );
}

#[test]
fn named_plugins_take_init_args_checked_while_planning() {
    let dir = tempfile::tempdir().unwrap();
    let every_8 = "--trainer.strategy={class_path: local_sgd, init_args: {every: 8}}";
    let scale = "--trainer.precision={class_path: bf16-static-scale, init_args: {scale: 256}}";
    let plan = app_in(
        dir.path(),
        &["fit", every_8, scale, "--trainer.devices=2", "--print-plan"],
        &[],
    );
    assert!(plan.status.success(), "{}", text(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(
        plan["init_args"]["local_sgd"],
        serde_json::json!({"every": 8})
    );
    assert_eq!(
        plan["init_args"]["bf16-static-scale"],
        serde_json::json!({"scale": 256})
    );
    // The config the run would write reads back to the same tables.
    let config = app_in(dir.path(), &["fit", every_8, "--print-config"], &[]);
    let config = String::from_utf8_lossy(&config.stdout);
    assert!(
        config.contains("class_path: local_sgd") && config.contains("every: 8"),
        "{config}"
    );
    // A misspelt argument, arguments for a plugin that takes none, for a plugin the run does
    // not use: exit 2 naming the flag and what is wrong, before anything runs.
    let err = refused(&[
        "fit",
        "--trainer.strategy={class_path: local_sgd, init_args: {evry: 8}}",
        "--trainer.devices=2",
    ]);
    assert!(
        err.contains("--trainer.strategy") && err.contains("evry") && err.contains("every"),
        "{err}"
    );
    let err = refused(&[
        "fit",
        "--trainer.strategy={class_path: ddp, init_args: {every: 8}}",
        "--trainer.devices=2",
    ]);
    assert!(err.contains("ddp takes no init_args"), "{err}");
    let err = refused(&[
        "fit",
        "--trainer.cluster_environment={class_path: local, init_args: {x: 1}}",
    ]);
    assert!(
        err.contains("--trainer.cluster_environment") && err.contains("local takes no init_args"),
        "{err}"
    );
    let err = refused(&[
        "fit",
        "--trainer.plugins=[{class_path: mpi, init_args: {x: 1}}]",
    ]);
    assert!(
        err.contains("--trainer.plugins") && err.contains("mpi"),
        "{err}"
    );
}

#[test]
fn the_strategys_init_args_reach_its_factory() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = FIT.to_vec();
    args.extend([
        "--trainer.strategy={class_path: local_sgd, init_args: {every: 7}}",
        "--trainer.devices=2",
        "--trainer.log_every_n_steps=1",
    ]);
    let out = app_in(dir.path(), &args, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = csv_rows(&dir.path().join("lightning_logs/version_0/metrics.csv"));
    let last = rows
        .iter()
        .rev()
        .find(|r| r.contains_key("local_sgd_averages"))
        .unwrap();
    let steps: u64 = last["step"].parse::<u64>().unwrap() + 1;
    let averages: u64 = last["local_sgd_averages"].parse().unwrap();
    assert_eq!(averages, steps / 7, "{last:?}");
}

#[test]
fn a_checkpoint_io_takes_its_directory_as_init_args() {
    let dir = tempfile::tempdir().unwrap();
    let mirror = dir.path().join("mirror");
    let plugins = format!(
        "--trainer.plugins=[{{class_path: mirrored, init_args: {{dir: {}}}}}]",
        mirror.display()
    );
    let out = app_in(
        dir.path(),
        &[
            "fit",
            "--trainer.max_epochs=2",
            "--trainer.enable_progress_bar=false",
            &plugins,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let copies: Vec<_> = std::fs::read_dir(&mirror)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        copies.iter().any(|name| name.ends_with(".ckpt")),
        "{copies:?}"
    );
    // Its directory is required: refused while planning, naming the argument.
    let err = refused(&[
        "fit",
        "--trainer.plugins=[{class_path: mirrored, init_args: {}}]",
    ]);
    assert!(
        err.contains("--trainer.plugins") && err.contains("missing field `dir`"),
        "{err}"
    );
}
