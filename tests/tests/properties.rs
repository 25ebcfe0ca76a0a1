//! Random flag values and environments never panic the connector or the CLI, and every
//! rejection names the input it rejects.

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
