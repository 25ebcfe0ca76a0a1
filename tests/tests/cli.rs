//! ACCEPTANCE 24–26 and the CLI's error contract, in process through `Cli::execute`.

use std::path::Path;

use ember::plugins::Env;
use ember::{Cli, CliOutcome, Invocation};
use ember_acceptance::{WhoRuns, env, registry};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Model {
    hidden: usize,
    lr: f64,
}

impl Default for Model {
    fn default() -> Self {
        Self { hidden: 8, lr: 0.1 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Data {
    batch_size: usize,
}

fn cli() -> Cli<Model, Data> {
    Cli::new("app", "test app", Model::default(), Data::default())
}

/// How a run ended, and the invocation the job was built from (if one was).
type Executed = (
    CliOutcome<<WhoRuns as ember::Job>::Output>,
    Option<Invocation<Model, Data>>,
);

fn execute(args: &[&str], env: &Env) -> Executed {
    let mut seen = None;
    let argv = std::iter::once("app")
        .chain(args.iter().copied())
        .map(String::from);
    let outcome = cli().execute(argv, env, &registry::<WhoRuns>(), |inv| {
        seen = Some(inv);
        WhoRuns
    });
    (outcome, seen)
}

fn printed(args: &[&str], env: &Env) -> String {
    match execute(args, env).0 {
        CliOutcome::Printed(text) => text,
        other => panic!("expected printed output for {args:?}, got {other:?}"),
    }
}

fn failure(args: &[&str]) -> String {
    match execute(args, &Env::new()).0 {
        CliOutcome::Failed { code: 2, message } => message,
        other => panic!("expected exit 2 for {args:?}, got {other:?}"),
    }
}

#[test]
fn a24_help_lists_every_registered_accelerator() {
    for args in [&["--help"][..], &["fit", "--help"][..]] {
        let help = printed(args, &Env::new());
        for name in ["auto", "gpu", "cpu", "cuda", "wgpu", "tpu"] {
            assert!(
                help.contains(&format!("  {name} ")),
                "{name} missing from:\n{help}"
            );
        }
        assert!(
            help.contains("--model.KEY=VALUE") && help.contains("hidden, lr"),
            "{help}"
        );
    }
    // The top level has no flags of its own: it says where they are (issue 39).
    let top = printed(&["--help"], &Env::new());
    assert!(top.contains("fit --help` lists them"), "{top}");
}

#[test]
fn a_program_without_a_name_is_called_by_its_file_name() {
    let cli = Cli::new("", "", Model::default(), Data::default());
    let argv = ["/some/where/sine", "--help"].map(String::from);
    let outcome = cli.execute(argv, &Env::new(), &registry::<WhoRuns>(), |_| WhoRuns);
    let CliOutcome::Printed(help) = outcome else {
        panic!("expected help, got {outcome:?}");
    };
    assert!(help.contains("`sine fit --help` lists them"), "{help}");
    assert!(help.contains("Usage: sine <COMMAND>"), "{help}");
}

#[test]
fn a25_print_plan_is_one_json_object_with_exactly_the_plan_keys() {
    let text = printed(
        &["fit", "--print-plan", "--trainer.devices=3"],
        &env(&[("EMBER_INVENTORY", "cuda=4")]),
    );
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<&str> = plan
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = [
        "accelerator",
        "strategy",
        "devices",
        "num_nodes",
        "precision",
        "deterministic",
        "flush_denormal",
        "cluster_environment",
        "world_size",
        "global_rank",
        "local_rank",
        "node_rank",
        "main_address",
        "main_port",
        "process_group_backend",
    ];
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(plan["devices"], serde_json::json!([0, 1, 2]));
    // ddp on cuda sums on the GPUs through NCCL where the real cuda accelerator is built in;
    // the planning-only stand-in has no device collective.
    let backend = if cfg!(feature = "cuda") {
        "nccl"
    } else {
        "mpi"
    };
    assert_eq!(plan["process_group_backend"], backend);
    assert_eq!(plan["accelerator"], "cuda");
    assert_eq!(plan["flush_denormal"], false, "off by default on a GPU");
    assert_eq!(plan["deterministic"], false);
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a26_yaml_and_toml_configs_merge_in_order_and_overrides_win() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = write(
        dir.path(),
        "a.yaml",
        "trainer:\n  devices: 2\nmodel:\n  hidden: 32\n  lr: 0.5\n",
    );
    let toml = write(
        dir.path(),
        "b.toml",
        "[model]\nhidden = 64\n[data]\nbatch_size = 7\n",
    );
    let (outcome, inv) = execute(
        &[
            "fit",
            "--config",
            &yaml,
            "--config",
            &toml,
            "--model.lr=0.25",
            "--trainer.devices",
            "1",
        ],
        &env(&[("EMBER_INVENTORY", "")]),
    );
    assert!(
        matches!(outcome, CliOutcome::Ran(("cpu", _))),
        "{outcome:?}"
    );
    let inv = inv.unwrap();
    assert_eq!(
        inv.model,
        Model {
            hidden: 64,
            lr: 0.25
        }
    );
    assert_eq!(inv.data.batch_size, 7);
    assert_eq!(inv.trainer.devices, ember::DevicesFlag::Count(1));

    let merged = printed(
        &[
            "fit",
            "--config",
            &yaml,
            "--config",
            &toml,
            "--print-config",
        ],
        &Env::new(),
    );
    assert!(
        merged.contains("hidden: 64")
            && merged.contains("lr: 0.5")
            && merged.contains("devices: 2"),
        "{merged}"
    );
    // The printed config is itself a valid config.
    let again = write(dir.path(), "c.yaml", &merged);
    assert_eq!(
        printed(&["fit", "--config", &again, "--print-config"], &Env::new()),
        merged
    );
}

#[test]
fn bad_config_input_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let broken = write(dir.path(), "broken.yaml", "trainer: [unclosed\n");
    let wrong_ext = write(dir.path(), "c.json", "{}");
    let unknown_top = write(dir.path(), "u.yaml", "seed_everything: 1\n");
    let classless = write(dir.path(), "o.yaml", "optimizer:\n  lr: 1\n");
    for (args, needle) in [
        (
            vec!["fit", "--config", "/nonexistent.yaml"],
            "--config value `/nonexistent.yaml`: file not found",
        ),
        (vec!["fit", "--config", &broken], "broken.yaml"),
        (vec!["fit", "--config", &wrong_ext], ".yaml, .yml or .toml"),
        (
            vec!["fit", "--config", &unknown_top],
            "unknown top-level key",
        ),
        (
            vec!["fit", "--config", &classless],
            "--optimizer value `{\"lr\":1}`: name the class first",
        ),
        (vec!["fit", "--model.depth=3"], "--model.depth"),
        // The option and its value, not the whole section (issue 39).
        (
            vec!["fit", "--model.hidden=wide"],
            "invalid --model.hidden value `wide`: invalid type: string",
        ),
        (vec!["fit", "--data.batch_size"], "--data.batch_size"),
        (
            vec!["fit", "--trainer.frobnicate=1"],
            "--trainer.frobnicate",
        ),
        (
            vec!["fit", "--trainer.num_nodes=abc"],
            "--trainer.num_nodes",
        ),
        (
            // 0 is Lightning's "train nothing"; below -1 is refused.
            vec!["fit", "--trainer.max_epochs=-2"],
            "--trainer.max_epochs",
        ),
        (vec!["fit", "--trainer.devices=[1,"], "--trainer.devices"),
        (vec!["train"], "train"),
    ] {
        let message = failure(&args);
        assert!(message.contains(needle), "{args:?}: {message}");
    }
}

/// One of ember's accelerators that this build left out names the feature that builds it in.
#[cfg(not(feature = "tch"))]
#[test]
fn an_accelerator_of_a_feature_left_out_names_the_feature() {
    let message = failure(&["fit", "--trainer.accelerator=tch-cpu"]);
    assert!(
        message.contains("unknown accelerator")
            && message.contains("built in by the `tch` feature of the `ember` crate"),
        "{message}"
    );
    let message = failure(&["fit", "--trainer.accelerator=frob"]);
    assert!(!message.contains("feature"), "{message}");
}

#[test]
fn fit_with_an_injected_accelerator_the_machine_lacks_exits_2() {
    let (outcome, inv) = execute(
        &["fit", "--trainer.accelerator=tpu"],
        &env(&[("EMBER_INVENTORY", "tpu=4")]),
    );
    assert!(inv.is_none(), "no job may be built");
    match outcome {
        CliOutcome::Failed { code: 2, message } => {
            assert!(message.contains("EMBER_INVENTORY"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_process_group_backend_is_chosen_with_plugins_and_checked_at_plan_time() {
    let cuda = env(&[("EMBER_INVENTORY", "cuda=2")]);
    let plan = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&printed(args, &cuda)).unwrap()
    };
    let ddp = [
        "fit",
        "--print-plan",
        "--trainer.accelerator=cuda",
        "--trainer.devices=2",
    ];
    let chosen = plan(&[&ddp[..], &["--trainer.plugins=[mpi]"]].concat());
    assert_eq!(chosen["process_group_backend"], "mpi");
    let single = plan(&["fit", "--print-plan", "--trainer.accelerator=cpu"]);
    assert!(single.get("process_group_backend").is_none(), "{single}");

    let on_cpu = failure(&["fit", "--trainer.strategy=ddp", "--trainer.plugins=[nccl]"]);
    if cfg!(feature = "cuda") {
        assert!(on_cpu.contains("--trainer.plugins"), "{on_cpu}");
        assert!(
            on_cpu.contains("accelerator cpu has no device collective"),
            "{on_cpu}"
        );
    } else {
        // Without the real cuda accelerator no device collective is registered at all.
        assert!(on_cpu.contains("unknown plugin"), "{on_cpu}");
    }
    let single_mpi = failure(&["fit", "--trainer.plugins=[mpi]"]);
    assert!(
        single_mpi.contains("strategy single_device runs one"),
        "{single_mpi}"
    );
}

/// The callbacks the flags name are built once, while planning, and handed to the job with its
/// invocation; the first Trainer to take them gets them.
#[test]
fn the_flags_callbacks_are_built_while_planning_and_taken_once() {
    let (outcome, seen) = execute(
        &["fit", "--trainer.callbacks=[LearningRateMonitor]"],
        &Env::new(),
    );
    assert!(matches!(outcome, CliOutcome::Ran(_)), "{outcome:?}");
    let invocation = seen.expect("the job was built");
    let shared = invocation.clone();
    let built = invocation.callbacks.take().expect("built while planning");
    let names: Vec<&str> = built.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["LearningRateMonitor"]);
    assert!(shared.callbacks.take().is_none(), "taken twice");
}
