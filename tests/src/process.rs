//! Child processes measured from the outside, for the benchmarks.

use std::process::Command;

/// Runs `command` to its end; its stdout, stderr and the peak RSS of its largest process.
pub fn run_measured(command: Command) -> anyhow::Result<(String, String, u64)> {
    let finished = ember::child::run_measured(command)?;
    anyhow::ensure!(finished.success, "the run failed: {}", finished.stderr);
    Ok((finished.stdout, finished.stderr, finished.peak_rss))
}
