//! ACCEPTANCE 23 and 24: registration by name, overrides, and the per-accelerator monomorphization.

use ember::plugins::Env;
use ember::{CliOutcome, TrainerFlags};
use ember_acceptance::{MixedCpu, WhoRuns, execute, injected, listed, registry};

#[test]
fn a23_registering_a_name_twice_suggests_the_override() {
    let err = registry::<WhoRuns>()
        .register::<MixedCpu>()
        .unwrap()
        .register::<MixedCpu>()
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("already registered")
            && err.to_string().contains("register_override")
    );
    let replaced = ember::registry::<WhoRuns>()
        .register_override::<ember_acceptance::PlannedTpu>()
        .unwrap()
        .register_override::<ember_acceptance::PlannedTpu>()
        .unwrap();
    let accelerators = listed(&replaced, "Accelerators");
    assert_eq!(
        accelerators
            .iter()
            .filter(|(name, _)| name == "tpu")
            .count(),
        1,
        "{accelerators:?}"
    );
    assert!(
        ember::Registry::<WhoRuns>::new()
            .register_strategy(
                ember::plugins::StrategyInfo::new("ddp", "again", true),
                |parts| Ok(Box::new(ember::plugins::Ddp::new(parts)))
            )
            .is_err()
    );
}

#[test]
fn a24_the_job_runs_monomorphized_for_the_selected_accelerator() {
    let registry = registry::<WhoRuns>().register::<MixedCpu>().unwrap();
    for (name, backend) in [("cpu", "Flex"), ("mixedcpu", "Flex")] {
        let args = [
            "fit",
            "--trainer.accelerator",
            name,
            "--trainer.logger=false",
        ];
        let CliOutcome::Ran((ran, ty)) = execute(&registry, &args, &Env::new(), || WhoRuns) else {
            panic!("{name} runs");
        };
        assert_eq!(ran, name);
        assert!(ty.contains("Autodiff") && ty.contains(backend), "{ty}");
    }
}

#[test]
fn an_injected_accelerator_the_machine_lacks_is_refused_at_run_time() {
    let registry = registry::<WhoRuns>();
    let env = injected("tpu=8", &Env::new());
    let plan = registry.plan(&TrainerFlags::default(), &env).unwrap();
    assert_eq!(plan.accelerator, "tpu");
    match execute(&registry, &["fit"], &env, || WhoRuns) {
        CliOutcome::Failed { code: 2, message } => assert!(
            message.contains("EMBER_INVENTORY")
                && message.contains("unset EMBER_INVENTORY to train"),
            "{message}"
        ),
        other => panic!("a tpu plan on a machine without one ran: {other:?}"),
    }
}

/// A precision plugin that runs on one process only.
struct OneProcessBf16;

impl ember::plugins::PrecisionPlugin for OneProcessBf16 {
    fn name(&self) -> &str {
        "bf16-one"
    }
    fn precision(&self) -> ember::Precision {
        ember::Precision::Bf16Mixed
    }
}

/// How it is registered: it refuses more than one process.
fn one_process_bf16() -> ember::plugins::PrecisionInfo {
    let info = ember::plugins::PrecisionInfo::new(
        "bf16-one",
        "one process only",
        ember::Precision::Bf16Mixed,
    );
    info.with_check(|plan| match plan.world_size {
        1 => Ok(()),
        n => Err(format!("it keeps no state across {n} processes")),
    })
}

/// ember's local environment under another name, refusing `ddp_sharded`.
struct NoSharding;

impl ember::plugins::ClusterEnvironment for NoSharding {
    fn name(&self) -> &str {
        "nosharding"
    }
    fn description(&self) -> &str {
        "local, without ddp_sharded"
    }
    fn detect(&self, env: &ember::plugins::Env) -> bool {
        env.contains_key("NO_SHARDING")
    }
    fn creates_processes_externally(&self) -> bool {
        false
    }
    fn ranks(
        &self,
        _: &ember::plugins::Env,
        devices: usize,
        nodes: usize,
    ) -> Result<ember::plugins::Ranks, ember::FlagError> {
        Ok(ember::plugins::Ranks::new(devices * nodes, 0, 0, 0))
    }
    fn check_plan(&self, plan: &ember::Plan) -> Result<(), String> {
        match plan.strategy.as_str() {
            "ddp_sharded" => Err("its nodes share no memory for sharding".into()),
            _ => Ok(()),
        }
    }
}

/// Issue 32.4: a registered strategy, precision plugin or cluster environment refuses a plan
/// while it is planned, as an error of the flag that chose it (the CLI exits 2 with it).
#[test]
fn registered_plugins_refuse_plans_at_plan_time() {
    let registry = registry::<WhoRuns>()
        .register_strategy(
            ember::plugins::StrategyInfo::new("pairs", "two ranks exactly", true).with_check(
                |plan| match plan.world_size {
                    2 => Ok(()),
                    n => Err(format!("it pairs ranks, and {n} is not 2")),
                },
            ),
            |parts| Ok(Box::new(ember::plugins::Ddp::new(parts))),
        )
        .unwrap()
        .register_precision(one_process_bf16(), |_| Ok(OneProcessBf16))
        .unwrap()
        .register_cluster_environment(NoSharding)
        .unwrap();
    let plan = |flags: TrainerFlags, env: &[(&str, &str)]| {
        registry.plan(&flags, &injected("", &ember_acceptance::env(env)))
    };
    let two = || TrainerFlags::default().devices(ember::DevicesFlag::Count(2));

    assert_eq!(plan(two().strategy("pairs"), &[]).unwrap().world_size, 2);
    let err = plan(TrainerFlags::default().strategy("pairs"), &[]).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.value.as_str()),
        ("--trainer.strategy", "pairs")
    );
    assert!(err.message.contains("1 is not 2"), "{err}");

    assert!(plan(TrainerFlags::default().precision("bf16-one"), &[]).is_ok());
    let err = plan(two().precision("bf16-one"), &[]).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.value.as_str()),
        ("--trainer.precision", "bf16-one")
    );
    assert!(err.message.contains("across 2 processes"), "{err}");
    let err = plan(two().plugins(vec!["bf16-one".to_owned()]), &[]).unwrap_err();
    assert_eq!(err.flag, "--trainer.plugins");

    let sharded = || two().strategy("ddp_sharded");
    assert!(plan(sharded(), &[]).is_ok(), "only when nosharding runs");
    let err = plan(sharded(), &[("NO_SHARDING", "1")]).unwrap_err();
    assert_eq!(
        (err.flag.as_str(), err.value.as_str()),
        ("--trainer.cluster_environment", "auto")
    );
    assert!(err.message.contains("nosharding") && err.message.contains("share no memory"));
    let err = plan(sharded().plugins(vec!["nosharding".to_owned()]), &[]).unwrap_err();
    assert_eq!(err.flag, "--trainer.plugins");
}

/// A logger that records nothing.
struct Sink;

impl ember::loggers::Logger for Sink {
    fn log_hyperparams(&mut self, _: &serde_json::Value) -> anyhow::Result<()> {
        Ok(())
    }

    fn log_metrics(
        &mut self,
        _: &std::collections::BTreeMap<String, f64>,
        _: u64,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}

#[test]
fn a_logger_cannot_take_a_name_the_logger_option_reads() {
    let sink = |_: &std::path::Path| Ok(Sink);
    for taken in [
        "csv",
        "tensorboard",
        "mlflow",
        "mlflowlogger",
        "csvlogger",
        "true",
        "false",
    ] {
        let err = ember::Registry::<WhoRuns>::new()
            .register_logger(taken, "", sink)
            .err()
            .unwrap_or_else(|| panic!("a logger named {taken} was registered"));
        assert!(err.to_string().contains("already taken"), "{taken}: {err}");
    }
}

#[test]
fn the_built_ins_are_registered_as_a_users_plugins_are_and_hold_their_names() {
    let registry = ember::Registry::<WhoRuns>::new();
    let names = |heading| -> Vec<String> {
        let listed = listed(&registry, heading);
        listed.into_iter().map(|(name, _)| name).collect()
    };
    assert_eq!(
        names("Strategies"),
        ["auto", "single_device", "ddp", "ddp_sharded", "xla"]
    );
    assert_eq!(
        names("Precisions"),
        [
            "32-true",
            "64-true",
            "16-true",
            "bf16-true",
            "16-mixed",
            "bf16-mixed"
        ]
    );
    let callbacks = names("Callbacks");
    assert!(
        callbacks.contains(&"EarlyStopping".to_owned())
            && callbacks.contains(&"Timer".to_owned())
            && callbacks.contains(&"OnExceptionCheckpoint".to_owned())
            && callbacks.contains(&"ThroughputMonitor".to_owned())
            && callbacks.contains(&"PredictionWriter".to_owned())
            && callbacks.len() == 12,
        "{callbacks:?}"
    );
    assert_eq!(names("Loggers"), ["csv", "tensorboard", "mlflow"]);

    // Their names are taken, as a user's would be.
    assert!(
        ember::Registry::<WhoRuns>::new()
            .register_precision(
                ember::plugins::PrecisionInfo::new("16-mixed", "again", ember::Precision::F16Mixed),
                |_| Ok(ember::plugins::MixedPrecision::f16(Default::default()))
            )
            .is_err()
    );
    assert!(
        ember::Registry::<WhoRuns>::new()
            .register_callback("early_stopping", "again", |_| Ok(
                ember::callbacks::ProgressBar::new(Default::default())
            ))
            .is_err()
    );
    // An override replaces a built-in strategy in the catalog and in what builds it.
    let replaced = ember::Registry::<WhoRuns>::new()
        .register_override_strategy(
            ember::plugins::StrategyInfo::new("ddp", "mine", true),
            |parts| Ok(Box::new(ember::plugins::SingleDevice::new(parts))),
        )
        .unwrap();
    let strategies = listed(&replaced, "Strategies");
    assert!(
        strategies.contains(&("ddp".to_owned(), "mine".to_owned())) && strategies.len() == 5,
        "{strategies:?}"
    );
}
