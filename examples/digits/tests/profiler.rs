//! `--trainer.profiler` from the command line: `simple` prints a table of the phases at the end
//! of each entry point (Lightning's SimpleProfiler report), `advanced` writes a Chrome trace per
//! rank with the phases nested; under ddp each rank profiles itself and rank 0 prints; a bad
//! value exits 2 naming the flag.

use std::path::Path;
use std::process::Output;

use ember_acceptance::{mpirun_available, run_cpu_only};

fn digits(dir: &Path, args: &[&str]) -> Output {
    let quiet = [
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    run_cpu_only(
        env!("CARGO_BIN_EXE_digits"),
        dir,
        &[args, &quiet[..]].concat(),
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The count and total seconds of `action` in a report table.
fn row(table: &str, action: &str) -> Option<(u64, f64)> {
    let line = table
        .lines()
        .find(|l| l.split('|').next().is_some_and(|a| a.trim() == action))?;
    let cells: Vec<&str> = line.split('|').map(str::trim).collect();
    Some((cells[1].parse().ok()?, cells[3].parse().ok()?))
}

#[test]
fn simple_prints_each_phase_at_the_end_of_each_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits(
        dir.path(),
        &["fit", "--trainer.max_epochs=2", "--trainer.profiler=simple"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stderr(&out);
    assert!(report.contains("Profiler report: fit"), "{report}");
    // 1,437 training images in batches of 64: 23 batches an epoch.
    for (action, count) in [
        ("training epoch", 2),
        ("training batch", 46),
        ("training step", 46),
        ("backward", 46),
        ("optimizer step", 46),
        ("gradient reduction", 46),
        // The sanity check and one pass per epoch.
        ("validation", 3),
        ("checkpoint", 2),
    ] {
        let (got, _) = row(&report, action).unwrap_or_else(|| panic!("{action}: {report}"));
        assert_eq!(got, count, "{action}: {report}");
    }
    for action in ["data fetch", "validation step", "callbacks", "loggers"] {
        assert!(row(&report, action).is_some(), "{action}: {report}");
    }
    let (_, total) = row(&report, "Total").unwrap();
    let (_, epochs) = row(&report, "training epoch").unwrap();
    assert!(epochs <= total, "{report}");
    let out = digits(
        dir.path(),
        &[
            "test",
            "--trainer.ckpt_path=last",
            "--trainer.profiler=simple",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stderr(&out);
    assert!(report.contains("Profiler report: test"), "{report}");
    assert!(row(&report, "test step").is_some(), "{report}");
    // Off by default: no report.
    let out = digits(dir.path(), &["fit", "--trainer.max_epochs=1"]);
    assert!(
        !stderr(&out).contains("Profiler report"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn advanced_writes_a_trace_per_rank_with_nested_phases() {
    if !mpirun_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = digits(
        dir.path(),
        &[
            "fit",
            "--trainer.max_epochs=1",
            "--trainer.devices=2",
            "--trainer.profiler=advanced",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("profiler trace written to").count(),
        1,
        "rank 0 says it"
    );
    let log_dir = dir.path().join("lightning_logs/version_0");
    for rank in 0..2 {
        let path = log_dir.join(format!("trace-fit-rank{rank}.json"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let trace: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert!(spans.iter().all(|e| e["pid"] == rank), "each rank's own");
        let named = |name: &str| spans.iter().filter(|e| e["name"] == name).count();
        // Each rank trains its half of the 1,437 images, in batches of 64: 12 steps.
        assert_eq!(named("optimizer step"), 12);
        assert_eq!(named("gradient reduction"), 12);
        // Every step lies within a training batch, every batch within the epoch.
        let within = |inner: &str, outer: &str| {
            let bounds = |e: &&&serde_json::Value| {
                let ts = e["ts"].as_f64().unwrap();
                (ts, ts + e["dur"].as_f64().unwrap())
            };
            let outers: Vec<(f64, f64)> = spans
                .iter()
                .filter(|e| e["name"] == outer)
                .map(|e| bounds(&e))
                .collect();
            spans.iter().filter(|e| e["name"] == inner).all(|e| {
                let (start, end) = bounds(&e);
                outers.iter().any(|&(s, t)| s <= start && end <= t)
            })
        };
        assert!(within("optimizer step", "training batch"));
        assert!(within("gradient reduction", "optimizer step"));
        assert!(within("training batch", "training epoch"));
    }
}

#[test]
fn a_bad_value_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = digits(dir.path(), &["fit", "--trainer.profiler=fast"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--trainer.profiler"),
        "{}",
        stderr(&out)
    );
}

/// The learning-rate finder's sweep before a fit is not the user's fit: it prints no report of
/// its own and writes no trace (under two ranks, none in the working directory either).
#[test]
fn the_learning_rate_finders_sweep_is_not_profiled() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "fit",
        "--trainer.max_epochs=1",
        "--trainer.lr_find={num_training: 20}",
    ];
    let out = digits(
        dir.path(),
        &[&args[..], &["--trainer.profiler=simple"]].concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("Profiler report: fit").count(),
        1,
        "{}",
        stderr(&out)
    );
    if !mpirun_available() {
        return;
    }
    let more = ["--trainer.profiler=advanced", "--trainer.devices=2"];
    let out = digits(dir.path(), &[&args[..], &more[..]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let in_cwd: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().ends_with(".json"))
        .collect();
    assert!(in_cwd.is_empty(), "{in_cwd:?}");
    let log_dir = dir.path().join("lightning_logs/version_1");
    for rank in 0..2 {
        assert!(
            log_dir.join(format!("trace-fit-rank{rank}.json")).is_file(),
            "rank {rank}"
        );
    }
}
