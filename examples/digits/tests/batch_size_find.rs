//! `--trainer.batch_size_find` from the command line: sizes doubled until the training set's
//! size, each trial a child process, the largest that fits used by the fit (hparams.yaml records
//! it); a trial over the memory budget does not fit; bad settings exit 2 naming the flag.

use std::path::Path;
use std::process::Output;

use ember_acceptance::run_cpu_only;

fn digits(dir: &Path, args: &[&str]) -> Output {
    let quiet = [
        "fit",
        "--trainer.max_epochs=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    run_cpu_only(
        env!("CARGO_BIN_EXE_digits"),
        dir,
        &[&quiet[..], args].concat(),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The batch size the fit recorded in hparams.yaml.
fn recorded(dir: &Path) -> u64 {
    let path = dir.join("lightning_logs/version_0/hparams.yaml");
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    yaml["data"]["batch_size"].as_u64().unwrap()
}

/// Each trial's size and whether it fitted, as printed.
fn trials(text: &str) -> Vec<(u64, bool)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("batch_size_find: "))
        .filter_map(|rest| {
            let (size, outcome) = rest.split_once(": ")?;
            Some((size.parse().ok()?, outcome.starts_with("fits")))
        })
        .collect()
}

#[test]
fn sizes_double_up_to_the_training_set_and_the_fit_uses_the_largest() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits(dir.path(), &["--trainer.batch_size_find=true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let tried = trials(&stderr(&out));
    let sizes: Vec<u64> = tried.iter().map(|t| t.0).collect();
    let cap = *sizes.last().unwrap();
    assert_eq!(sizes, [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, cap]);
    assert!(
        (1024..2048).contains(&cap),
        "the training set's size: {cap}"
    );
    assert!(tried.iter().all(|t| t.1), "{}", stderr(&out));
    assert_eq!(recorded(dir.path()), cap);
    // One step: the whole training set in one batch.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("trained 1 step "), "{stdout}");
}

#[test]
fn a_trial_over_the_memory_budget_does_not_fit() {
    // A budget of 1 MB, as a share of the memory available now: no process fits in it. (Which
    // sizes fit under a larger budget is what the unit tests of the search and the verdict
    // check; a trial's peak memory varies by megabytes from run to run, so a CLI test that
    // split the sizes at a budget would be flaky.)
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let available_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let share = 1024.0 / available_kib;
    let dir = tempfile::tempdir().unwrap();
    let setting =
        format!("--trainer.batch_size_find={{memory_share: {share:.12}, mode: binsearch}}");
    let out = digits(dir.path(), &[&setting]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // Size 2 is over the budget; binsearch halves to 1, which is too; then it gives up.
    assert_eq!(trials(&text), [(2, false), (1, false)], "{text}");
    assert_eq!(text.matches("over the budget").count(), 2, "{text}");
    assert!(
        text.contains("no batch size fits (tried 2, 1; budget "),
        "{text}"
    );
}

#[test]
fn bad_settings_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec!["--trainer.batch_size_find={mode: linear}"],
            "power or binsearch",
        ),
        (
            vec!["--trainer.batch_size_find={memory_share: 2}"],
            "memory_share",
        ),
        (
            vec!["--trainer.batch_size_find={batch_arg_name: bs}"],
            "data.bs",
        ),
        (
            vec!["--trainer.batch_size_find=true", "--trainer.devices=2"],
            "one process",
        ),
    ] {
        let out = digits(dir.path(), &args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains("--trainer.batch_size_find") && text.contains(needle),
            "{text}"
        );
    }
}
