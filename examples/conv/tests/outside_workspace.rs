//! ember as a dependency: the conv example built as a crate outside this workspace from the
//! guide's `Cargo.toml` (ember by path, no `[patch]`) gets ember's own CPU crates and trains.
//! Its speed against `examples/conv` is `cargo xtask bench outside`'s.

mod outside;

#[test]
fn a_crate_outside_the_workspace_gets_the_fast_cpu_crates_and_trains() {
    let dir = tempfile::tempdir().unwrap();
    outside::make_crate(dir.path());
    let manifest = std::fs::read_to_string(dir.path().join("Cargo.toml")).unwrap();
    assert!(!manifest.contains("[patch"), "{manifest}");

    // Built as `cargo build` builds it: the release build the guide runs compiles every crate
    // again with optimisations (about ten minutes on a 2-core VM, twice this one's time); what
    // is tested here, which crates cargo picks and that the program trains, is the same.
    let binary = outside::build(dir.path(), "dev").unwrap_or_else(|e| panic!("{e}"));
    // Cargo built burn's CPU backend and autodiff from ember's copies and no others.
    let built = outside::packages(dir.path());
    for package in ["ember-burn-flex", "ember-burn-autodiff"] {
        assert!(built.iter().any(|p| p == package), "{package}: {built:?}");
    }
    for package in ["burn-flex", "burn-autodiff"] {
        assert!(!built.iter().any(|p| p == package), "{package}: {built:?}");
    }

    let out = std::process::Command::new(binary)
        .args([
            "fit",
            "--trainer.max_epochs=3",
            "--trainer.enable_progress_bar=false",
        ])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let val_acc = ember_acceptance::reported(&stdout, "val_acc")
        .unwrap_or_else(|| panic!("no val_acc in {stdout}"));
    assert!(val_acc >= 0.9, "val_acc {val_acc}: {stdout}");
}
