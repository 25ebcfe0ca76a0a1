//! docs/getting-started.md stays true: each of its Rust snippets is taken from this example
//! (or from the acceptance test of the Trainer without the CLI, or, for the training patterns,
//! from the tests and examples of each), and the program it builds trains.

use std::path::Path;
use std::process::{Command, Output};

// The guide's `Cargo.toml` block as a program of its own uses it, shared with the conv
// example's test of a crate outside the workspace.
#[path = "../../conv/tests/outside/mod.rs"]
#[allow(dead_code)]
mod outside;
use outside::guide_dependencies;

/// Lines with their indentation removed, blank lines dropped: snippets in the guide start at
/// column 0 where the source has them indented.
fn normalized(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_rust_snippet_of_the_guide_is_taken_from_compiled_code() {
    let guide = include_str!("../../../docs/getting-started.md");
    let sources = normalized(
        &[
            include_str!("../src/main.rs"),
            include_str!("../../../tests/tests/first_model.rs"),
            // "Training patterns" shows code of the tests and examples of each.
            include_str!("../../gan/src/lib.rs"),
            include_str!("../../../tests/tests/multiple_loaders.rs"),
            include_str!("../../../tests/tests/finetuning.rs"),
            include_str!("../../../tests/tests/weight_averaging.rs"),
        ]
        .join("\n"),
    );
    let snippets: Vec<&str> = guide
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert!(snippets.len() >= 5, "{} snippets", snippets.len());
    for snippet in snippets {
        assert!(
            sources.contains(&normalized(snippet)),
            "this snippet of docs/getting-started.md is not in the example's sources:\n{snippet}"
        );
    }
}

/// Runs the guide's program in `dir` on this machine's CPU.
fn first_model(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_first_model"))
        .args(args)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "")
        .output()
        .unwrap()
}

#[test]
fn the_guide_program_trains_and_validates_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let args = [args, &["--trainer.enable_progress_bar=false"]].concat();
        first_model(dir.path(), &args)
    };
    let fit = run(&["fit", "--trainer.max_epochs=20"]);
    let stdout = String::from_utf8_lossy(&fit.stdout);
    assert!(
        fit.status.success(),
        "{}",
        String::from_utf8_lossy(&fit.stderr)
    );
    let val_acc: f64 = stdout
        .rsplit("; val_acc ")
        .next()
        .and_then(|rest| rest.split(';').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no val_acc in {stdout}"));
    assert!(val_acc >= 0.95, "val_acc {val_acc}");
    let log_dir = dir.path().join("lightning_logs/version_0");
    for file in ["metrics.csv", "curves.png", "hparams.yaml"] {
        assert!(log_dir.join(file).exists(), "{file}");
    }
    let validate = run(&["validate", "--trainer.ckpt_path=last"]);
    assert!(validate.status.success());
    assert!(String::from_utf8_lossy(&validate.stdout).contains("val_acc "));
}

/// `cargo generate-lockfile --offline` on a new program with the guide's dependencies: cargo
/// resolves every crate, version and feature the guide names from the index it cached
/// when it built this workspace (no download, no build, no network).
fn resolves(dependencies: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!(
        "[package]\nname = \"from_the_guide\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{dependencies}"
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/main.rs"), "fn main() {}\n").unwrap();
    let out = Command::new(env!("CARGO"))
        .args(["generate-lockfile", "--offline"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[test]
fn the_guide_dependency_lines_resolve() {
    let plain = guide_dependencies("");
    assert!(
        !plain.contains("[patch"),
        "ember needs no [patch]:\n{plain}"
    );
    resolves(&plain).expect("the guide's [dependencies]");
    let ddp = guide_dependencies(", features = [\"mpi\"]");
    resolves(&ddp).expect("the guide's [dependencies] with the mpi feature");
    let guide = include_str!("../../../docs/getting-started.md");
    assert!(
        guide.contains("features = [\"mpi\"] }`"),
        "the ddp step names the mpi feature"
    );
}

#[test]
fn the_guide_names_the_packages_setup_installs_for_mpi() {
    let setup = include_str!("../../../scripts/setup.sh");
    let packages = setup
        .lines()
        .find_map(|l| l.strip_prefix("mpi_packages=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("mpi_packages=(...) in scripts/setup.sh");
    let guide = include_str!("../../../docs/getting-started.md");
    let command = format!("sudo apt-get install {packages}");
    assert!(
        guide.contains(&command),
        "the guide does not say `{command}`"
    );
    assert!(guide.contains("scripts/setup.sh --mpi"));
}

#[test]
fn each_epoch_line_shows_the_train_and_validation_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let out = first_model(
        dir.path(),
        &["fit", "--trainer.max_epochs=2", "--trainer.logger=false"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let epochs: Vec<&str> = stderr.lines().filter(|l| l.starts_with("epoch ")).collect();
    assert_eq!(epochs.len(), 2, "{stderr}");
    for line in epochs {
        // train_loss is logged without prog_bar: the line shows it as the summary does.
        assert!(
            line.contains("train_loss=") && line.contains("val_acc="),
            "{line}"
        );
    }
}

#[test]
fn a_batch_size_of_0_is_an_error_naming_the_loader_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = first_model(dir.path(), &["fit", "--data.batch_size=0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the train loader (DataModule::train_loader) has batch_size 0"),
        "{stderr}"
    );
}
