//! ACCEPTANCE 23 and 24: registration by name, overrides, and the per-accelerator monomorphization.

use ember::{Inventory, TrainerFlags};
use ember_acceptance::{MixedCpu, WhoRuns, registry};

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
            .register_strategy(ember::StrategyInfo::new("ddp", "again", true), |parts| Ok(
                Box::new(ember::Ddp::new(parts))
            ))
            .is_err()
    );
}

#[test]
fn a24_the_job_runs_monomorphized_for_the_selected_accelerator() {
    let registry = registry::<WhoRuns>().register::<MixedCpu>().unwrap();
    let inventory = Inventory::probe(registry.catalog());
    for (name, backend) in [("cpu", "Flex"), ("mixedcpu", "Flex")] {
        let plan = ember::connect(
            &TrainerFlags::default().accelerator(name),
            &ember::Env::new(),
            &inventory,
            registry.catalog(),
        )
        .unwrap();
        let (ran, ty) = registry.run(WhoRuns, &plan, &inventory).unwrap();
        assert_eq!(ran, name);
        assert!(ty.contains("Autodiff") && ty.contains(backend), "{ty}");
    }
}

#[test]
fn an_injected_accelerator_the_machine_lacks_is_refused_at_run_time() {
    let registry = registry::<WhoRuns>();
    let inventory = Inventory::parse("tpu=8", registry.catalog()).unwrap();
    let plan = ember::connect(
        &TrainerFlags::default(),
        &ember::Env::new(),
        &inventory,
        registry.catalog(),
    )
    .unwrap();
    assert_eq!(plan.accelerator, "tpu");
    let e = registry.check_hardware(&plan, &inventory).unwrap_err();
    assert_eq!(e.flag, "EMBER_INVENTORY");
    assert!(e.message.contains("unset EMBER_INVENTORY to train"), "{e}");
    assert!(registry.run(WhoRuns, &plan, &inventory).is_err());
}
