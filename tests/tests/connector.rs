//! ACCEPTANCE 1–15 and 18–23: selection rules through the pure connector, injected inventories.

use ember::{DevicesFlag, Launcher, Precision, TrainerFlags};
use ember_acceptance::{env, injected, plan, plan_with};

fn flags() -> TrainerFlags {
    TrainerFlags::default()
}

fn err_of(flags: &TrainerFlags, inventory: &str) -> ember::FlagError {
    plan(flags, inventory).expect_err("expected a rejection")
}

fn ids(v: &[i64]) -> DevicesFlag {
    DevicesFlag::Ids(v.to_vec())
}

#[test]
fn a01_invalid_accelerator_lists_registered_names() {
    let e = err_of(&flags().accelerator("invalid"), "");
    assert_eq!(e.flag, "--trainer.accelerator");
    assert_eq!(e.value, "invalid");
    for name in ["auto", "gpu", "cpu", "cuda", "wgpu", "tpu"] {
        assert!(e.message.contains(name), "{e}");
    }
}

#[test]
fn a02_cpu_only_defaults() {
    let p = plan(&flags(), "").unwrap();
    assert_eq!(
        (
            p.accelerator.as_str(),
            p.strategy.as_str(),
            p.devices.as_slice(),
            p.precision
        ),
        ("cpu", "single_device", &[0][..], Precision::F32True)
    );
    assert_eq!((p.world_size, p.global_rank, p.num_nodes), (1, 0, 1));
    assert_eq!(p.cluster_environment, "local");
    assert_eq!(p.launcher(), Launcher::None);
}

#[test]
fn a03_auto_priority_tpu_cuda_wgpu_cpu() {
    let auto = flags();
    assert_eq!(
        plan(&auto, "tpu=8,cuda=4,wgpu=1").unwrap().accelerator,
        "tpu"
    );
    assert_eq!(plan(&auto, "cuda=4,wgpu=1").unwrap().accelerator, "cuda");
    assert_eq!(plan(&auto, "wgpu=1").unwrap().accelerator, "wgpu");
    assert_eq!(plan(&auto, "cuda=0").unwrap().accelerator, "cpu");
}

#[test]
fn a04_gpu_means_cuda_else_wgpu() {
    let gpu = flags().accelerator("gpu");
    assert_eq!(plan(&gpu, "cuda=2,wgpu=1").unwrap().accelerator, "cuda");
    assert_eq!(plan(&gpu, "wgpu=1,tpu=8").unwrap().accelerator, "wgpu");
    let e = err_of(&gpu, "tpu=8");
    assert!(e.message.contains("no GPU accelerator is available"), "{e}");
}

#[test]
fn a05_unavailable_cuda_names_the_available_ones() {
    let e = err_of(&flags().accelerator("cuda"), "wgpu=1");
    assert!(e.message.contains("cuda is not available"), "{e}");
    // cpu first, then the others in registration order (tch-cpu too where `tch` is built in).
    let expected = if cfg!(feature = "tch") {
        "available accelerators: cpu, tch-cpu, wgpu"
    } else {
        "available accelerators: cpu, wgpu"
    };
    assert!(e.message.contains(expected), "{e}");
}

#[test]
fn a06_zero_devices_is_not_a_number_of_devices() {
    for accel in ["cpu", "cuda", "tpu"] {
        for d in [
            DevicesFlag::Count(0),
            DevicesFlag::parse("0").unwrap(),
            ids(&[]),
        ] {
            let e = err_of(
                &flags().accelerator(accel).devices(d.clone()),
                "cuda=2,tpu=8",
            );
            assert_eq!(e.flag, "--trainer.devices");
            assert!(
                e.message.contains("not a valid number of devices"),
                "{accel} {d}: {e}"
            );
        }
    }
}

#[test]
fn a07_cpu_devices_count_processes() {
    let cpu = flags().accelerator("cpu");
    assert_eq!(
        plan(&cpu.clone().devices(DevicesFlag::Count(1)), "")
            .unwrap()
            .strategy,
        "single_device"
    );
    let p = plan(&cpu.clone().devices(DevicesFlag::Count(5)), "").unwrap();
    assert_eq!(
        (p.strategy.as_str(), p.devices.len(), p.world_size),
        ("ddp", 5, 5)
    );
    assert_eq!(p.launcher(), Launcher::Local { processes: 5 });
    for bad in [DevicesFlag::Count(-1), ids(&[3])] {
        let e = err_of(&cpu.clone().devices(bad), "");
        assert!(e.message.contains("an integer > 0"), "{e}");
    }
}

#[test]
fn a08_gpu_device_parsing_with_16_devices() {
    let cuda = |d: DevicesFlag| plan(&flags().accelerator("cuda").devices(d), "cuda=16");
    let parsed = |s: &str| DevicesFlag::parse(s).unwrap();
    assert_eq!(cuda(DevicesFlag::Count(1)).unwrap().devices, [0]);
    assert_eq!(cuda(DevicesFlag::Count(3)).unwrap().devices, [0, 1, 2]);
    assert_eq!(
        cuda(DevicesFlag::Count(-1)).unwrap().devices,
        (0..16).collect::<Vec<_>>()
    );
    assert_eq!(cuda(ids(&[1, 3])).unwrap().devices, [1, 3]);
    assert_eq!(cuda(parsed("3")).unwrap().devices, [0, 1, 2]);
    assert_eq!(cuda(parsed("1, 3")).unwrap().devices, [1, 3]);
    let e = cuda(ids(&[0, 0])).unwrap_err();
    assert!(e.message.contains("ids must be unique"), "{e}");
    let e = cuda(ids(&[1, 2, 19])).unwrap_err();
    assert!(
        e.message.contains("19") && e.message.contains("16 devices exist"),
        "{e}"
    );
    assert!(cuda(DevicesFlag::Count(17)).is_err());
}

#[test]
fn a09_four_cuda_devices_default_to_ddp_with_the_local_launcher() {
    let p = plan(&flags(), "cuda=4").unwrap();
    assert_eq!(
        (
            p.accelerator.as_str(),
            p.strategy.as_str(),
            p.devices.as_slice()
        ),
        ("cuda", "ddp", &[0, 1, 2, 3][..])
    );
    assert_eq!((p.cluster_environment.as_str(), p.world_size), ("local", 4));
    assert_eq!(p.launcher(), Launcher::Local { processes: 4 });
}

#[test]
fn a10_ddp_with_one_device_stays_ddp() {
    let p = plan(&flags().strategy("ddp").devices(DevicesFlag::Count(1)), "").unwrap();
    assert_eq!((p.strategy.as_str(), p.devices.len()), ("ddp", 1));
}

#[test]
fn a11_strategy_names_are_case_insensitive() {
    assert_eq!(plan(&flags().strategy("DDP"), "").unwrap().strategy, "ddp");
    let e = err_of(&flags().strategy("fsdp2"), "");
    assert_eq!(e.flag, "--trainer.strategy");
    assert!(e.message.contains("auto, single_device, ddp"), "{e}");
    let e = err_of(
        &flags()
            .strategy("single_device")
            .devices(DevicesFlag::Count(2)),
        "",
    );
    assert!(e.message.contains("use --trainer.strategy=ddp"), "{e}");
}

#[test]
fn the_xla_strategy_is_refused_off_the_xla_accelerator_before_anything_runs() {
    // tpu: the stand-in for a TPU plugin in these tests, not the xla accelerator.
    for (accelerator, devices) in [("cpu", 2), ("tpu", 8)] {
        let e = err_of(
            &flags()
                .accelerator(accelerator)
                .strategy("xla")
                .devices(DevicesFlag::Count(devices)),
            "tpu=8",
        );
        let (flag, value) = (e.flag.as_str(), e.value.as_str());
        assert_eq!((flag, value), ("--trainer.strategy", "xla"), "{e}");
        assert!(e.message.contains("use --trainer.accelerator=xla"), "{e}");
    }
}

#[test]
fn a12_num_nodes_must_be_positive() {
    for n in [0, -1] {
        let e = err_of(&flags().num_nodes(n), "");
        assert_eq!(e.flag, "--trainer.num_nodes");
        assert!(
            e.message.contains("num_nodes must be a positive integer"),
            "{e}"
        );
    }
    let p = plan(&flags().num_nodes(2), "").unwrap();
    assert_eq!((p.strategy.as_str(), p.world_size), ("ddp", 2));
}

#[test]
fn a13_tpu_device_forms() {
    let tpu = |d: DevicesFlag| plan(&flags().accelerator("tpu").devices(d), "tpu=8");
    assert_eq!(tpu(DevicesFlag::Auto).unwrap().devices.len(), 8);
    assert_eq!(tpu(DevicesFlag::Count(1)).unwrap().devices, [0]);
    assert_eq!(tpu(DevicesFlag::Count(8)).unwrap().devices.len(), 8);
    assert_eq!(tpu(ids(&[5])).unwrap().devices, [5]);
    for bad in [
        DevicesFlag::Count(4),
        ids(&[1, 2]),
        ids(&[8]),
        DevicesFlag::Count(-1),
    ] {
        let e = tpu(bad).unwrap_err();
        assert!(
            e.message
                .contains("`auto`, 1, 8 (all of them), or a one-element list"),
            "{e}"
        );
    }
}

#[test]
fn a14_precision_names() {
    let e = err_of(&flags().precision("fp8"), "");
    for p in Precision::ALL {
        assert!(e.message.contains(p.name()), "{e}");
    }
    assert_eq!(
        plan(&flags().precision("32-true"), "").unwrap().precision,
        Precision::F32True
    );
}

#[test]
fn a14_a17_precisions_an_accelerator_cannot_run_are_refused_at_plan_time() {
    for p in ["64-true", "bf16-mixed", "16-true"] {
        let e = err_of(&flags().accelerator("tpu").precision(p), "tpu=4");
        assert_eq!(e.flag, "--trainer.precision");
        assert!(
            e.message
                .contains(&format!("accelerator tpu cannot run {p}"))
                && e.message.contains("it runs: 32-true"),
            "{e}"
        );
    }
    for p in ["64-true", "16-true", "bf16-true", "bf16-mixed"] {
        assert_eq!(plan(&flags().precision(p), "").unwrap().precision.name(), p);
    }
}

#[test]
fn a15_16_mixed_on_cpu_warns_and_uses_bf16_mixed() {
    let p = plan(&flags().precision("16-mixed"), "").unwrap();
    assert_eq!(p.precision, Precision::Bf16Mixed);
    assert_eq!(p.warnings.len(), 1, "warns once: {:?}", p.warnings);
    assert!(
        p.warnings[0].contains("using bf16-mixed"),
        "{:?}",
        p.warnings
    );
    // A CPU accelerator that can run bf16-mixed gets it, with a warning.
    let registry = ember_acceptance::registry::<ember_acceptance::WhoRuns>()
        .register::<ember_acceptance::MixedCpu>()
        .unwrap();
    // A host-CPU accelerator is always there, as cpu is: an injected inventory neither needs
    // nor takes a count for it.
    let err = (registry.plan(&flags(), &injected("mixedcpu=1", &env(&[])))).unwrap_err();
    assert!(
        err.to_string().contains(
            "mixedcpu runs on the host CPU, which is always available and takes no count"
        ),
        "{err}"
    );
    let p = registry
        .plan(
            &flags().accelerator("mixedcpu").precision("16-mixed"),
            &injected("", &env(&[])),
        )
        .unwrap();
    assert_eq!(p.precision, Precision::Bf16Mixed);
    assert!(
        p.warnings[0].contains("using bf16-mixed"),
        "{:?}",
        p.warnings
    );
}

const ELASTIC: [(&str, &str); 5] = [
    ("TORCHELASTIC_RUN_ID", "abc"),
    ("WORLD_SIZE", "4"),
    ("RANK", "3"),
    ("LOCAL_RANK", "1"),
    ("GROUP_RANK", "1"),
];
const SLURM: [(&str, &str); 7] = [
    ("SLURM_NTASKS", "4"),
    ("SLURM_PROCID", "2"),
    ("SLURM_LOCALID", "0"),
    ("SLURM_NODEID", "1"),
    ("SLURM_NODELIST", "node[01-04,07]"),
    ("SLURM_JOB_NAME", "train"),
    ("SLURM_JOB_ID", "123456"),
];

fn two_by_two() -> TrainerFlags {
    flags().devices(DevicesFlag::Count(2)).num_nodes(2)
}

#[test]
fn a18_torchelastic_wins_over_slurm() {
    let vars: Vec<_> = ELASTIC.iter().chain(SLURM.iter()).copied().collect();
    let p = plan_with(&two_by_two(), "", &env(&vars)).unwrap();
    assert_eq!(p.cluster_environment, "torchelastic");
    assert_eq!(
        (p.world_size, p.global_rank, p.local_rank, p.node_rank),
        (4, 3, 1, 1)
    );
    assert_eq!(p.launcher(), Launcher::None);
    let missing = env(&ELASTIC[..3]);
    let e = plan_with(&two_by_two(), "", &missing).unwrap_err();
    assert_eq!(e.flag, "LOCAL_RANK");
}

#[test]
fn a19_slurm_ranks_and_main_address() {
    let p = plan_with(&two_by_two(), "", &env(&SLURM)).unwrap();
    assert_eq!(p.cluster_environment, "slurm");
    assert_eq!(
        (p.world_size, p.global_rank, p.local_rank, p.node_rank),
        (4, 2, 0, 1)
    );
    assert_eq!(p.main_address, "node01");
    // 15000 plus the job id's last four digits.
    assert_eq!(p.main_port, 18456);
    let mut interactive = env(&SLURM);
    interactive.insert("SLURM_JOB_NAME".into(), "bash".into());
    assert_eq!(
        plan_with(&flags(), "", &interactive)
            .unwrap()
            .cluster_environment,
        "local"
    );
    let e = plan_with(&flags(), "", &env(&SLURM)).unwrap_err();
    assert!(e.message.contains("slurm environment started 4"), "{e}");
}

#[test]
fn a20_master_addr_and_port_override() {
    let mut vars = env(&SLURM);
    vars.insert("MASTER_ADDR".into(), "10.0.0.9".into());
    vars.insert("MASTER_PORT".into(), "1234".into());
    let p = plan_with(&two_by_two(), "", &vars).unwrap();
    assert_eq!((p.main_address.as_str(), p.main_port), ("10.0.0.9", 1234));
    let local = plan_with(&flags(), "", &env(&[("MASTER_PORT", "4321")])).unwrap();
    assert_eq!(local.main_port, 4321);
    let e = plan_with(&flags(), "", &env(&[("MASTER_PORT", "99999")])).unwrap_err();
    assert_eq!(e.flag, "MASTER_PORT");
}

#[test]
fn a21_local_ranks_from_local_rank_and_node_rank() {
    let vars = env(&[("LOCAL_RANK", "1"), ("NODE_RANK", "1")]);
    let p = plan_with(&two_by_two(), "", &vars).unwrap();
    assert_eq!(
        (p.global_rank, p.local_rank, p.node_rank, p.world_size),
        (3, 1, 1, 4)
    );
    let e = plan_with(&flags(), "", &env(&[("LOCAL_RANK", "1")])).unwrap_err();
    assert_eq!(e.flag, "LOCAL_RANK");
}

#[test]
fn a22_explicit_environment_wins_over_detection() {
    let p = plan_with(&flags().cluster_environment("local"), "", &env(&SLURM)).unwrap();
    assert_eq!(p.cluster_environment, "local");
    let e = plan_with(&flags().cluster_environment("slurm"), "", &env(&[])).unwrap_err();
    assert_eq!(e.flag, "SLURM_NTASKS");
    let e = plan_with(&flags().cluster_environment("pbs"), "", &env(&[])).unwrap_err();
    assert!(
        e.message
            .contains("torchelastic, slurm, lsf, mpi, kubeflow, local"),
        "{e}"
    );
}

#[test]
fn lsf_mpi_and_kubeflow_environments() {
    let lsf = env(&[
        ("LSB_JOBID", "7"),
        ("JSM_NAMESPACE_SIZE", "4"),
        ("JSM_NAMESPACE_RANK", "3"),
        ("JSM_NAMESPACE_LOCAL_RANK", "1"),
        ("LSB_MCPU_HOSTS", "batch1 1 hostA 42 hostB 42"),
    ]);
    let p = plan_with(&two_by_two(), "", &lsf).unwrap();
    assert_eq!(p.cluster_environment, "lsf");
    assert_eq!(
        (
            p.global_rank,
            p.local_rank,
            p.node_rank,
            p.main_address.as_str()
        ),
        (3, 1, 1, "hostA")
    );

    let openmpi = env(&[
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),
    ]);
    let p = plan_with(&flags().num_nodes(2), "", &openmpi).unwrap();
    assert_eq!(p.cluster_environment, "mpi");
    assert_eq!(
        (p.world_size, p.global_rank, p.local_rank, p.node_rank),
        (2, 1, 0, 1)
    );

    let mpich = env(&[
        ("PMI_SIZE", "2"),
        ("PMI_RANK", "1"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ]);
    let p = plan_with(&flags().devices(DevicesFlag::Count(2)), "", &mpich).unwrap();
    assert_eq!(
        (
            p.cluster_environment.as_str(),
            p.global_rank,
            p.local_rank,
            p.node_rank
        ),
        ("mpi", 1, 1, 0)
    );

    let kubeflow = env(&[
        ("KUBERNETES_PORT", "tcp://10.0.0.1:443"),
        ("MASTER_ADDR", "job-master-0"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "3"),
        ("RANK", "2"),
    ]);
    let p = plan_with(&flags().num_nodes(3), "", &kubeflow).unwrap();
    assert_eq!(p.cluster_environment, "kubeflow");
    assert_eq!(
        (
            p.global_rank,
            p.node_rank,
            p.main_address.as_str(),
            p.main_port
        ),
        (2, 2, "job-master-0", 23456)
    );
}

#[test]
fn injected_inventory_errors_name_the_variable() {
    for bad in [
        "cuda",
        "cuda=x",
        "npu=2",
        "cpu=2",
        "cuda=1,cuda=2",
        "cuda=99999",
    ] {
        let e = plan(&flags(), bad).unwrap_err();
        assert_eq!(e.flag, "EMBER_INVENTORY", "{bad}");
    }
}
