//! `cargo xtask test --repeat N [--row R]`: runs the selected rows N times over and counts, for
//! every test that failed at least once, in how many runs it failed, so whether a test is
//! flaky is a number anyone can check.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use crate::command;
use crate::leftovers::Watch;
use crate::matrix::Row;

/// The `N` of `--repeat N` in `args`: `None` without the flag, an error for a count that is
/// not an integer ≥ 1.
pub(crate) fn count(args: &[&str]) -> Result<Option<usize>, String> {
    let Some(at) = args.iter().position(|a| *a == "--repeat") else {
        return Ok(None);
    };
    let value = args.get(at + 1).copied().unwrap_or("");
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(format!("invalid --repeat value `{value}`: an integer >= 1")),
    }
}

/// Runs every row of `rows` `runs` times, passing its output through, then prints each test
/// that failed with the number of runs it failed in; true when nothing failed.
pub(crate) fn repeat(rows: &[Row], runs: usize) -> bool {
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed_runs = Vec::new();
    for run in 1..=runs {
        for row in rows {
            let (ok, tests) = run_row(row);
            for test in tests {
                *failed.entry(format!("{} {test}", row.backend)).or_default() += 1;
            }
            if !ok {
                failed_runs.push(format!("run {run} of {}", row.backend));
            }
        }
    }
    let names: Vec<&str> = rows.iter().map(|r| r.backend).collect();
    println!(
        "\nrepeat: {runs} run{} of {}: {} failed{}",
        if runs == 1 { "" } else { "s" },
        names.join(", "),
        failed_runs.len(),
        match failed_runs.is_empty() {
            true => String::new(),
            false => format!(" ({})", failed_runs.join(", ")),
        }
    );
    for (test, times) in &failed {
        println!("  {times} of {runs}  {test}");
    }
    if failed.is_empty() && !failed_runs.is_empty() {
        println!("  no test failed: the build or a harness did (see the output above)");
    }
    failed_runs.is_empty()
}

/// Runs one row, passing its output through; whether it passed, and the tests that failed
/// (`target :: test`).
fn run_row(row: &Row) -> (bool, Vec<String>) {
    let watch = Watch::start(row.backend);
    let Ok((reader, writer)) = std::io::pipe() else {
        eprintln!("xtask: cannot make a pipe for cargo's output");
        return (false, Vec::new());
    };
    let spawned = {
        let mut cargo = command("cargo", &row.args(), &row.envs, &row.watched_env(&watch));
        // Both streams in one pipe, in the order cargo and the tests write them. The command
        // is dropped at the end of this block, closing its ends of the pipe.
        match writer.try_clone() {
            Ok(err) => cargo.stdout(writer).stderr(err).spawn(),
            Err(e) => Err(e),
        }
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            eprintln!("xtask: cannot run cargo: {e}");
            return (false, Vec::new());
        }
    };
    let mut target = String::new();
    let mut failed = Vec::new();
    for line in BufReader::new(reader).lines().map_while(Result::ok) {
        println!("{line}");
        if let Some(running) = running_target(&line) {
            target = running;
        } else if let Some(test) = failed_test(&line) {
            failed.push(format!("{target} :: {test}"));
        }
    }
    let ok = child.wait().is_ok_and(|status| status.success());
    if !watch.finish() {
        failed.push("processes or files left behind by the row".to_owned());
    }
    (ok && failed.is_empty(), failed)
}

/// The test target a `Running` line of cargo starts: `tests/cli.rs (cli)` from
/// `     Running tests/cli.rs (/target/debug/deps/cli-0123abcd)`.
fn running_target(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("Running ")?;
    let (source, binary) = rest.split_once(" (")?;
    let file = binary.trim_end_matches(')').rsplit('/').next()?;
    let name = file.rsplit_once('-').map_or(file, |(name, _)| name);
    Some(format!("{source} ({name})"))
}

/// The test a libtest line reports failed: `name` from `test name ... FAILED`.
fn failed_test(line: &str) -> Option<&str> {
    line.strip_prefix("test ")?.strip_suffix(" ... FAILED")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargos_lines_name_the_target_and_the_failed_test() {
        let running = "     Running tests/restarts.rs (/root/.cache/ember-target/debug/deps/restarts-5f1c0e2a9b)";
        assert_eq!(
            running_target(running).as_deref(),
            Some("tests/restarts.rs (restarts)")
        );
        let unit = "     Running unittests src/lib.rs (/t/debug/deps/ember_core-0a1b)";
        assert_eq!(
            running_target(unit).as_deref(),
            Some("unittests src/lib.rs (ember_core)")
        );
        assert_eq!(
            failed_test("test a_slurm_job_requeues ... FAILED"),
            Some("a_slurm_job_requeues")
        );
        assert_eq!(failed_test("test a_slurm_job_requeues ... ok"), None);
        assert_eq!(failed_test("failures:"), None);
    }

    #[test]
    fn the_count_is_an_integer_of_at_least_one() {
        assert_eq!(count(&["--row", "cpu"]), Ok(None));
        assert_eq!(count(&["--repeat", "5", "--row", "cpu"]), Ok(Some(5)));
        for bad in [&["--repeat", "0"][..], &["--repeat", "x"], &["--repeat"]] {
            let e = count(bad).unwrap_err();
            assert!(e.contains("--repeat") && e.contains(">= 1"), "{e}");
        }
    }
}
