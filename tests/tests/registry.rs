//! ACCEPTANCE 23 and 24: registration by name, overrides, and the per-accelerator monomorphization.

use ember_acceptance::{MixedCpu, WhoRuns, registry};
use ember_core::{Inventory, TrainerFlags};

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
    assert_eq!(
        replaced
            .catalog()
            .accelerators
            .iter()
            .filter(|a| a.name == "tpu")
            .count(),
        1
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
    let inventory = Inventory::probe(registry.catalog());
    for (name, backend) in [("cpu", "Flex"), ("mixedcpu", "Flex")] {
        let plan = ember_core::connect(
            &TrainerFlags::default().accelerator(name),
            &ember::plugins::Env::new(),
            &inventory,
            registry.catalog(),
        )
        .unwrap();
        let (ran, ty) = registry.run(WhoRuns, &plan, None, &inventory).unwrap();
        assert_eq!(ran, name);
        assert!(ty.contains("Autodiff") && ty.contains(backend), "{ty}");
    }
}

#[test]
fn an_injected_accelerator_the_machine_lacks_is_refused_at_run_time() {
    let registry = registry::<WhoRuns>();
    let inventory = Inventory::parse("tpu=8", registry.catalog()).unwrap();
    let plan = ember_core::connect(
        &TrainerFlags::default(),
        &ember::plugins::Env::new(),
        &inventory,
        registry.catalog(),
    )
    .unwrap();
    assert_eq!(plan.accelerator, "tpu");
    let e = registry.check_hardware(&plan, &inventory).unwrap_err();
    assert_eq!(e.flag, "EMBER_INVENTORY");
    assert!(e.message.contains("unset EMBER_INVENTORY to train"), "{e}");
    assert!(registry.run(WhoRuns, &plan, None, &inventory).is_err());
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
        env: &ember::plugins::Env,
        devices: usize,
        nodes: usize,
    ) -> ember_core::error::PlanResult<ember::plugins::Ranks> {
        ember_core::cluster::LocalEnvironment.ranks(env, devices, nodes)
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
        .register_precision(one_process_bf16(), || OneProcessBf16)
        .unwrap()
        .register_cluster_environment(NoSharding)
        .unwrap();
    let inventory = Inventory::parse("", registry.catalog()).unwrap();
    let plan = |flags: TrainerFlags, env: &[(&str, &str)]| {
        ember_core::connect(
            &flags,
            &ember_acceptance::env(env),
            &inventory,
            registry.catalog(),
        )
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

/// A logger that records the metrics it is given.
struct Recording(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl ember::loggers::Logger for Recording {
    fn log_hyperparams(&mut self, _: &serde_json::Value) -> anyhow::Result<()> {
        Ok(())
    }

    fn log_metrics(
        &mut self,
        metrics: &std::collections::BTreeMap<String, f64>,
        _: u64,
    ) -> anyhow::Result<()> {
        let mut seen = self.0.lock().unwrap();
        seen.extend(metrics.keys().cloned());
        Ok(())
    }
}

#[test]
fn a_logger_cannot_take_a_name_the_logger_option_reads_and_one_by_any_other_name_is_reached() {
    let sink = |_: &std::path::Path| Ok(Recording(Default::default()));
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

    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let shared = std::sync::Arc::clone(&seen);
    let registry = ember::Registry::<WhoRuns>::new()
        .register_logger("jsonl", "JSON lines", move |_| {
            Ok(Recording(std::sync::Arc::clone(&shared)))
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let names = ["JsonlLogger".to_owned()];
    let mut loggers =
        ember_core::registered::build::loggers(dir.path(), &names, registry.plugins()).unwrap();
    loggers
        .log_metrics(&[("loss".to_owned(), 1.0)].into(), 3)
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), ["loss"]);
}

#[test]
fn the_built_ins_are_registered_as_a_users_plugins_are_and_hold_their_names() {
    let registry = ember::Registry::<WhoRuns>::new();
    let catalog = registry.catalog();
    let strategies: Vec<&str> = catalog.strategies.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(strategies, ["single_device", "ddp", "ddp_sharded", "xla"]);
    let precisions: Vec<&str> = catalog.plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        precisions,
        [
            "32-true",
            "64-true",
            "16-true",
            "bf16-true",
            "16-mixed",
            "bf16-mixed"
        ]
    );
    let callbacks: Vec<&str> = catalog.callbacks.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        callbacks.contains(&"EarlyStopping") && callbacks.len() == 8,
        "{callbacks:?}"
    );
    let loggers: Vec<&str> = catalog.loggers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(loggers, ["csv", "tensorboard", "mlflow"]);

    // Their names are taken, as a user's would be.
    assert!(
        ember::Registry::<WhoRuns>::new()
            .register_precision(
                ember::plugins::PrecisionInfo::new("16-mixed", "again", ember::Precision::F16Mixed),
                || ember::plugins::MixedPrecision::f16(Default::default())
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
    let ddp = replaced.catalog().strategy("ddp").unwrap();
    assert_eq!(ddp.description, "mine");
    assert_eq!(replaced.catalog().strategies.len(), 4);
}
