//! The built-in environments against the cases Lightning's own environment tests cover.

use super::*;

fn env(vars: &[(&str, &str)]) -> Env {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn ranks_of(environment: &dyn ClusterEnvironment, vars: &[(&str, &str)]) -> PlanResult<Ranks> {
    resolve_ranks(environment, &env(vars), 1, 1)
}

const SLURM: [(&str, &str); 4] = [
    ("SLURM_NTASKS", "20"),
    ("SLURM_PROCID", "1"),
    ("SLURM_LOCALID", "2"),
    ("SLURM_NODEID", "3"),
];

#[test]
fn slurm_reads_its_variables_and_derives_the_port_from_the_job_id() {
    let mut vars = SLURM.to_vec();
    vars.extend([
        ("SLURM_NODELIST", "1.1.1.1, 1.1.1.2"),
        ("SLURM_JOB_ID", "0001234"),
    ]);
    let r = ranks_of(&SlurmEnvironment, &vars).unwrap();
    assert_eq!(
        (r.world_size, r.global_rank, r.local_rank, r.node_rank),
        (20, 1, 2, 3)
    );
    assert_eq!(
        (r.main_address.as_str(), r.main_port),
        ("1.1.1.1", 15000 + 1234)
    );
}

#[test]
fn slurm_without_a_node_list_or_job_id_uses_lightnings_defaults() {
    let r = ranks_of(&SlurmEnvironment, &SLURM).unwrap();
    assert_eq!((r.main_address.as_str(), r.main_port), ("127.0.0.1", 12910));
    let e = ranks_of(&SlurmEnvironment, &[]).unwrap_err();
    assert_eq!(e.flag, "SLURM_NTASKS");
}

#[test]
fn slurm_requeues_its_job_or_its_array_task_and_the_others_do_not() {
    let command = |vars: &[(&str, &str)]| SlurmEnvironment.requeue_command(&env(vars));
    assert_eq!(
        command(&[("SLURM_JOB_ID", "1234")]),
        Some(vec!["scontrol".into(), "requeue".into(), "1234".into()])
    );
    let array = [
        ("SLURM_JOB_ID", "1240"),
        ("SLURM_ARRAY_JOB_ID", "1234"),
        ("SLURM_ARRAY_TASK_ID", "6"),
    ];
    assert_eq!(command(&array).unwrap()[2], "1234_6");
    assert_eq!(command(&[("SLURM_NTASKS", "2")]), None);
    let others: [&dyn ClusterEnvironment; 3] =
        [&LocalEnvironment, &TorchElasticEnvironment, &MpiEnvironment];
    for other in others {
        assert_eq!(other.requeue_command(&env(&[("SLURM_JOB_ID", "1")])), None);
    }
}

#[test]
fn slurm_detection_skips_interactive_jobs() {
    assert!(!SlurmEnvironment.detect(&env(&[])));
    assert!(SlurmEnvironment.detect(&env(&[("SLURM_NTASKS", "2")])));
    let interactive = env(&[("SLURM_NTASKS", "2"), ("SLURM_JOB_NAME", "bash")]);
    assert!(!SlurmEnvironment.detect(&interactive));
}

#[test]
fn torchelastic_defaults_the_node_and_port_and_takes_master_variables() {
    let vars = [("WORLD_SIZE", "20"), ("RANK", "1"), ("LOCAL_RANK", "2")];
    let r = ranks_of(&TorchElasticEnvironment, &vars).unwrap();
    assert_eq!(
        (r.node_rank, r.main_address.as_str(), r.main_port),
        (0, "127.0.0.1", 12910)
    );
    let mut vars = vars.to_vec();
    vars.extend([
        ("GROUP_RANK", "3"),
        ("MASTER_ADDR", "1.2.3.4"),
        ("MASTER_PORT", "500"),
    ]);
    let r = ranks_of(&TorchElasticEnvironment, &vars).unwrap();
    assert_eq!(
        (r.node_rank, r.main_address.as_str(), r.main_port),
        (3, "1.2.3.4", 500)
    );
    assert_eq!(
        ranks_of(&TorchElasticEnvironment, &[]).unwrap_err().flag,
        "WORLD_SIZE"
    );
    assert!(TorchElasticEnvironment.detect(&env(&[("TORCHELASTIC_RUN_ID", "")])));
    assert!(!TorchElasticEnvironment.detect(&env(&[])));
}

const LSF: [(&str, &str); 4] = [
    ("LSB_JOBID", "1234"),
    ("JSM_NAMESPACE_SIZE", "4"),
    ("JSM_NAMESPACE_RANK", "3"),
    ("JSM_NAMESPACE_LOCAL_RANK", "1"),
];

#[test]
fn lsf_reads_the_main_host_from_its_rank_file_and_the_port_from_the_job_id() {
    let dir = std::env::temp_dir().join(format!("ember-lsf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rankfile = dir.join("rankfile");
    std::fs::write(
        &rankfile,
        "batch\n10.10.10.0\n10.10.10.1\n10.10.10.2\n10.10.10.3",
    )
    .unwrap();
    let mut vars = LSF.to_vec();
    let path = rankfile.display().to_string();
    vars.push(("LSB_DJOB_RANKFILE", &path));
    let r = resolve_ranks(&LsfEnvironment, &env(&vars), 2, 2).unwrap();
    assert_eq!((r.world_size, r.global_rank, r.local_rank), (4, 3, 1));
    assert_eq!(
        (r.main_address.as_str(), r.main_port),
        ("10.10.10.0", 10234)
    );
    assert!(LsfEnvironment.detect(&env(&vars)));
    std::fs::remove_dir_all(&dir).unwrap();

    let mut empty = LSF.to_vec();
    empty.push(("LSB_DJOB_RANKFILE", ""));
    let e = ranks_of(&LsfEnvironment, &empty).unwrap_err();
    assert_eq!(e.flag, "LSB_DJOB_RANKFILE");
    assert!(e.message.contains("empty"), "{e}");
    let e = ranks_of(&LsfEnvironment, &LSF[1..]).unwrap_err();
    assert_eq!(e.flag, "LSB_JOBID");
}

#[test]
fn an_mpi_world_of_one_is_not_an_mpi_run() {
    let one = [("OMPI_COMM_WORLD_SIZE", "1"), ("OMPI_COMM_WORLD_RANK", "0")];
    assert!(!MpiEnvironment.detect(&env(&one)));
    let zero = [("PMI_SIZE", "0"), ("PMI_RANK", "0")];
    assert!(!MpiEnvironment.detect(&env(&zero)));
    let two = [("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")];
    assert!(MpiEnvironment.detect(&env(&two)));
    let environments = builtin_environments();
    assert_eq!(detect(&environments, &env(&one)).unwrap().name(), LOCAL);
}

#[test]
fn kubeflow_needs_the_operators_variables_and_is_not_torchelastic() {
    let vars = [
        ("KUBERNETES_PORT", "tcp://127.0.0.1:443"),
        ("MASTER_ADDR", "1.2.3.4"),
        ("MASTER_PORT", "500"),
        ("WORLD_SIZE", "20"),
        ("RANK", "1"),
    ];
    assert!(KubeflowEnvironment.detect(&env(&vars)));
    let r = ranks_of(&KubeflowEnvironment, &vars).unwrap();
    assert_eq!(
        (r.world_size, r.global_rank, r.local_rank, r.node_rank),
        (20, 1, 0, 1)
    );
    assert_eq!((r.main_address.as_str(), r.main_port), ("1.2.3.4", 500));
    let mut elastic = vars.to_vec();
    elastic.push(("LOCAL_WORLD_SIZE", "1"));
    assert!(!KubeflowEnvironment.detect(&env(&elastic)));
    let e = ranks_of(&KubeflowEnvironment, &vars[3..]).unwrap_err();
    assert_eq!(e.flag, "MASTER_ADDR");
}
