//! Random flag values, environments and config files never panic the connector or the CLI,
//! and every rejection names the input it rejects. The config files' cases and seed come from
//! `EMBER_FUZZ_CASES` and `EMBER_FUZZ_SEED` where `cargo xtask fuzz` sets them.

use ember::TrainerFlags;
use ember::plugins::Env;
use ember::{Cli, CliOutcome};
use ember_acceptance::{WhoRuns, registry};
use proptest::prelude::*;
use serde_json::{Value, json};

const INPUTS: [&str; 23] = [
    "--trainer.accelerator",
    "--trainer.strategy",
    "--trainer.devices",
    "--trainer.num_nodes",
    "--trainer.precision",
    "--trainer.cluster_environment",
    "--trainer.max_epochs",
    "--trainer",
    "EMBER_INVENTORY",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "RANK",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
];

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        (-3i64..20).prop_map(|n| n.to_string()),
        Just("99999999999999999999999999".to_owned()),
        Just("auto".to_owned()),
        Just("".to_owned()),
        "[a-z_0-9-]{0,12}",
        "\\PC{0,8}",
        prop::collection::vec(-2i64..20, 0..4).prop_map(|v| format!("{v:?}")),
        prop::collection::vec(-2i64..20, 0..4).prop_map(|v| v
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")),
        prop::sample::select(vec![
            "cpu",
            "cuda",
            "wgpu",
            "tpu",
            "gpu",
            "DDP",
            "single_device",
            "32-true",
            "bf16-mixed",
            "slurm",
            "node[01-04,07]",
            "node[9-1]",
            "x[",
            "cuda=4",
            "cuda=4,wgpu=1",
            "tpu=8",
            "cpu=1",
            "1e9",
            "-1",
            "0",
        ])
        .prop_map(str::to_owned),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        scalar().prop_map(Value::String),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        prop::collection::vec(any::<i32>(), 0..5).prop_map(|v| json!(v)),
        Just(Value::Null),
        Just(json!({"nested": 1})),
        any::<bool>().prop_map(|b| json!(b)),
    ]
}

fn environment() -> impl Strategy<Value = Env> {
    let keys: Vec<&str> = INPUTS
        .iter()
        .copied()
        .filter(|k| !k.starts_with("--"))
        .collect();
    prop::collection::btree_map(
        prop::sample::select(keys).prop_map(str::to_owned),
        scalar(),
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, .. ProptestConfig::default() })]

    #[test]
    fn connector_never_panics_and_names_the_input(
        values in prop::collection::btree_map(
            prop::sample::select(vec!["accelerator", "strategy", "devices", "num_nodes", "precision", "cluster_environment", "max_epochs", "bogus"]),
            json_value(),
            0..5,
        ),
        env in environment(),
    ) {
        let section = Value::Object(values.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
        let registry = registry::<WhoRuns>();
        let result = TrainerFlags::from_value(&section).and_then(|flags| registry.plan(&flags, &env));
        if let Err(e) = result {
            prop_assert!(
                INPUTS.contains(&e.flag.as_str()) || e.flag.starts_with("--trainer.") || e.flag.starts_with("SLURM_") || e.flag.starts_with("OMPI_"),
                "unnamed input: {e}"
            );
            prop_assert!(!e.message.is_empty());
        }
    }

    #[test]
    fn cli_never_panics_and_every_rejection_names_a_flag(
        args in prop::collection::vec((prop::sample::select(INPUTS[..7].to_vec()), scalar()), 0..4),
        env in environment(),
    ) {
        let cli = Cli::new("app", "", json!({"a": 1}), json!({}));
        let mut argv = vec!["app".to_owned(), "fit".to_owned(), "--print-plan".to_owned()];
        argv.extend(args.iter().map(|(k, v)| format!("{k}={v}")));
        match cli.execute(argv, &env, &registry::<WhoRuns>(), |_| WhoRuns) {
            CliOutcome::Printed(json) => {
                let plan: Value = serde_json::from_str(&json).unwrap();
                prop_assert!(plan["world_size"].as_u64().unwrap() >= 1);
            }
            CliOutcome::Failed { code, message } => {
                prop_assert_eq!(code, 2);
                let named = INPUTS.iter().any(|f| message.contains(f)) || message.contains("SLURM_") || message.contains("OMPI_");
                prop_assert!(named, "unnamed input: {}", message);
            }
            CliOutcome::Ran(_) | CliOutcome::Launched { .. } | CliOutcome::Stopped { .. } => {
                prop_assert!(false, "--print-plan must not run the job or start processes")
            }
        }
    }
}

/// A number from the environment, else `default`.
fn from_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The config fuzz's settings: a fixed seed, and as many cases as asked for.
fn fuzz_config() -> ProptestConfig {
    ProptestConfig {
        cases: from_env("EMBER_FUZZ_CASES", 400) as u32,
        rng_seed: proptest::test_runner::RngSeed::Fixed(from_env("EMBER_FUZZ_SEED", 20261128)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A config file's text: a YAML tree of sections, keys (real and not) and random values, or
/// that tree cut short, or arbitrary text.
fn config_text() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "accelerator",
        "devices",
        "precision",
        "strategy",
        "max_epochs",
        "callbacks",
        "logger",
        "plugins",
        "limit_train_batches",
        "gradient_clip_val",
        "seed",
        "a",
        "bogus",
        "",
    ]);
    let section = prop::collection::btree_map(key, json_value(), 0..5);
    let tree = prop::collection::btree_map(
        prop::sample::select(vec![
            "trainer",
            "trainer",
            "trainer",
            "model",
            "data",
            "ckpt_path",
        ]),
        prop_oneof![section.prop_map(|s| json!(s)), json_value()],
        0..4,
    )
    .prop_map(|tree| serde_yaml::to_string(&tree).unwrap());
    prop_oneof![
        4 => tree.clone(),
        1 => (tree, any::<prop::sample::Index>()).prop_map(|(text, cut)| {
            let at = cut.index(text.len() + 1);
            text.char_indices().map(|(i, _)| i).take_while(|&i| i <= at).last().map_or(String::new(), |i| text[..i].to_owned())
        }),
        1 => "\\PC{0,60}",
        1 => Just("trainer: [unclosed".to_owned()),
        1 => Just("trainer:\n  max_epochs: 1\n  max_epochs: 2\n".to_owned()),
    ]
}

proptest! {
    #![proptest_config(fuzz_config())]

    #[test]
    fn config_files_never_panic_the_cli_and_every_rejection_names_its_input(text in config_text()) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, &text).unwrap();
        let cli = Cli::new("app", "", json!({"a": 1}), json!({}));
        let argv = ["app", "fit", "--config", file.to_str().unwrap(), "--print-plan"].map(String::from);
        let env = ember_acceptance::injected("", &Env::new());
        match cli.execute(argv, &env, &registry::<WhoRuns>(), |_| WhoRuns) {
            CliOutcome::Printed(_) => {}
            CliOutcome::Failed { code, message } => {
                prop_assert_eq!(code, 2);
                let named = message.contains("--config") || message.contains("config.yaml") || message.contains("--trainer") || message.contains("--model") || message.contains("--data") || message.contains("EMBER_INVENTORY");
                prop_assert!(named, "unnamed input: {} for\n{}", message, text);
            }
            other => prop_assert!(false, "--print-plan ran or started something: {:?}", other),
        }
    }
}
