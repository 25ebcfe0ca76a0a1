//! ACCEPTANCE 30 (short form; `cargo xtask fault checkpoint --runs 100` is the long one): a
//! writer killed with SIGKILL at random moments always leaves a loadable newest checkpoint.

#[test]
fn killed_writes_leave_the_previous_checkpoint_loadable() {
    let writer = std::path::Path::new(env!("CARGO_BIN_EXE_ckpt_writer"));
    let runs = 12;
    let loadable = ember_acceptance::fault::kill_runs(writer, runs, 42, false).unwrap();
    assert_eq!(loadable, runs);
}

#[test]
fn the_harness_catches_writes_without_the_atomic_protocol() {
    let writer = std::path::Path::new(env!("CARGO_BIN_EXE_ckpt_writer"));
    // Most kills tear an in-place write; look for the first one in up to 40 runs.
    let torn =
        (0..40).any(|seed| ember_acceptance::fault::kill_runs(writer, 1, seed, true).unwrap() == 0);
    assert!(
        torn,
        "in-place writes survived 40 kills: the test cannot see tears"
    );
}

#[test]
fn a_damaged_checkpoint_is_reported_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = ember::checkpoint::Checkpoint::encode(
        ember::checkpoint::Progress {
            epoch: 3,
            global_step: 3,
            ..Default::default()
        },
        Default::default(),
        Vec::new(),
        vec![("model".into(), ember_acceptance::fault::payload(3))],
    )
    .unwrap();
    std::fs::write(dir.path().join("torn.ckpt"), &bytes[..bytes.len() / 2]).unwrap();
    let e = ember_acceptance::fault::verify(dir.path()).unwrap_err();
    assert!(e.to_string().contains("torn.ckpt is truncated"), "{e}");
}
