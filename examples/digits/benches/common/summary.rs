//! Reading the summary line a fit prints (`trained N steps in S s (...) on ...`).

/// The seconds of training the summary line in `stdout` reports (without process start-up).
pub fn fit_seconds(stdout: &str) -> anyhow::Result<f64> {
    stdout
        .split(" steps in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no timing in {stdout:?}"))
}
