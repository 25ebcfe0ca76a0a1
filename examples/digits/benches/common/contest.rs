//! What the benchmarks against PyTorch share: a callback that clocks validation (train time
//! leaves it out, as the Python side does) and the pinned venv's python.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use ember::callbacks::{Callback, CallbackContext};

/// Adds the time spent in each validation pass (the sanity check included) to `seconds`.
pub struct ValClock {
    started: Option<Instant>,
    seconds: Rc<Cell<f64>>,
}

impl ValClock {
    /// A clock adding to `seconds`.
    pub fn new(seconds: Rc<Cell<f64>>) -> Self {
        Self {
            started: None,
            seconds,
        }
    }
}

impl Callback for ValClock {
    fn name(&self) -> &str {
        "ValClock"
    }

    fn on_validation_start(&mut self, _ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.started = Some(Instant::now());
        Ok(())
    }

    fn on_validation_end(&mut self, _ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if let Some(started) = self.started.take() {
            self.seconds
                .set(self.seconds.get() + started.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

/// The venv's python (`VIRTUAL_ENV`, which `cargo xtask` sets to the pinned venv); the error
/// names the xtask command `bench` that installs it.
pub fn python(bench: &str) -> anyhow::Result<PathBuf> {
    let venv = std::env::var_os("VIRTUAL_ENV").ok_or_else(|| {
        anyhow::anyhow!("VIRTUAL_ENV is not set: run `cargo xtask bench {bench}`, which installs and uses the pinned torch venv")
    })?;
    Ok(PathBuf::from(venv).join("bin/python"))
}

/// What one contender's process printed last (its JSON report) and cost: the report, the
/// wall seconds and the peak RSS in bytes of its largest process.
pub fn run_contender(
    name: &str,
    command: std::process::Command,
) -> anyhow::Result<(serde_json::Value, f64, u64)> {
    let start = Instant::now();
    let (stdout, stderr, peak_rss) = ember_acceptance::process::run_measured(command)
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let wall_s = start.elapsed().as_secs_f64();
    let line = stdout.lines().last().unwrap_or_default();
    let report = serde_json::from_str(line)
        .map_err(|e| anyhow::anyhow!("{name} printed no report ({e}): {stdout}{stderr}"))?;
    Ok((report, wall_s, peak_rss))
}
