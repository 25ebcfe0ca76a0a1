//! The batch-size finder (`--trainer.batch_size_find`): Lightning's batch-size scaling, each
//! trial a child process of the program itself (the same command line with the size and a few
//! steps set), so a trial that runs out of memory on a GPU (an abort inside the backend) ends
//! only that process. A trial fits when its process exits cleanly and its peak resident memory
//! stays within the budget (a share of the memory available when the search starts).

use std::process::Command;

use anyhow::Context;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::child::{Finished, run_measured};
use crate::error::FlagError;
use crate::options::{BatchSizeFind, ScaleMode};
use crate::stage::Stage;
use crate::trainer::data::DataModule;

/// One size tried, and how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    /// The batch size.
    pub size: u64,
    /// Its process's peak resident memory, in bytes.
    pub peak_rss: u64,
    /// `None` when it fitted, else why not.
    pub failure: Option<String>,
}

/// The sizes Lightning's scaling tries, given how each went: from `init_val`, doubled after a
/// fit; after a failure, `power` stops and `binsearch` halves the gap between the last fit and
/// the failure until they are adjacent; never above `cap` (the training set's size, which a
/// larger batch cannot exceed). Returns the largest size that fitted, if any.
pub fn search(
    settings: &BatchSizeFind,
    cap: u64,
    mut fits: impl FnMut(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<Option<u64>> {
    let (mut low, mut high): (Option<u64>, Option<u64>) = (None, None);
    let mut size = settings.init_val.min(cap);
    for _ in 0..settings.max_trials {
        if fits(size)? {
            low = Some(size);
            if size >= cap {
                break;
            }
        } else {
            high = Some(size);
            if settings.mode == ScaleMode::Power {
                break;
            }
        }
        size = match (low, high) {
            (Some(l), Some(h)) if h - l <= 1 => break,
            (Some(l), Some(h)) => (l + h) / 2,
            (Some(l), None) => (l * 2).min(cap),
            (None, Some(h)) if h <= 1 => break,
            (None, Some(h)) => h / 2,
            (None, None) => unreachable!("a trial ran"),
        };
    }
    Ok(low)
}

/// The memory available now (Linux's `MemAvailable`), in bytes.
fn available_memory() -> anyhow::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .context("/proc/meminfo has no MemAvailable")?;
    Ok(kib * 1024)
}

/// Where the batch size is among the hyperparameters: `data.<name>`, else `model.<name>`.
fn batch_key(hparams: &Value, name: &str) -> anyhow::Result<&'static str> {
    let section = ["data", "model"]
        .into_iter()
        .find(|s| hparams[*s].get(name).is_some_and(Value::is_u64));
    section.ok_or_else(|| {
        FlagError::new(
            "--trainer.batch_size_find",
            format!("{{batch_arg_name: {name}}}"),
            format!(
                "a batch size among the hyperparameters: data.{name} or model.{name} (name another key with batch_arg_name)"
            ),
        )
        .into()
    })
}

/// Runs one trial: this program's own command line (`args`) with the size, a few steps and
/// nothing written.
fn trial(
    args: &[String],
    flag: &str,
    size: u64,
    settings: &BatchSizeFind,
) -> anyhow::Result<Finished> {
    let mut command = Command::new(std::env::current_exe().context("finding this program")?);
    command.args(args).args([
        format!("{flag}={size}"),
        format!("--trainer.max_steps={}", settings.steps_per_trial),
        "--trainer.max_epochs=-1".into(),
        "--trainer.limit_val_batches=0".into(),
        "--trainer.num_sanity_val_steps=0".into(),
        "--trainer.logger=false".into(),
        "--trainer.enable_checkpointing=false".into(),
        "--trainer.enable_progress_bar=false".into(),
        "--trainer.enable_model_summary=false".into(),
        "--trainer.batch_size_find=false".into(),
        "--trainer.lr_find=false".into(),
        "--trainer.profiler=null".into(),
        "--trainer.ckpt_path=null".into(),
    ]);
    run_measured(command)
}

/// `--trainer.batch_size_find` before a CLI fit in one process: the search, each trial a run of
/// this program; the largest size that fits goes into `data` (and `hparams`). Prints each
/// trial and the result.
pub(crate) fn before_fit<D>(
    settings: &BatchSizeFind,
    data: &mut D,
    hparams: &mut Value,
) -> anyhow::Result<()>
where
    D: DataModule + Serialize + DeserializeOwned,
{
    let name = settings.batch_arg_name.as_str();
    let section = batch_key(hparams, name)?;
    data.setup(Stage::Fit)?;
    let cap = data
        .train_loader()?
        .map_or(u64::MAX, |loader| loader.dataset.len() as u64);
    let budget = (available_memory()? as f64 * settings.memory_share) as u64;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = format!("--{section}.{name}");
    let mut trials = Vec::new();
    let found = search(settings, cap, |size| {
        let finished = trial(&args, &flag, size, settings)?;
        let failure = verdict(&finished, budget);
        eprintln!(
            "batch_size_find: {size}: {} (peak {} MB)",
            failure.as_deref().unwrap_or("fits"),
            finished.peak_rss >> 20
        );
        let fits = failure.is_none();
        trials.push(Trial {
            size,
            peak_rss: finished.peak_rss,
            failure,
        });
        Ok(fits)
    })?;
    let Some(size) = found else {
        anyhow::bail!(
            "batch_size_find: no batch size fits (tried {}; budget {} MB)",
            trials
                .iter()
                .map(|t| t.size.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            budget >> 20
        );
    };
    hparams[section][name] = size.into();
    if section == "data" {
        let mut value = serde_json::to_value(&*data)?;
        value[name] = size.into();
        *data = serde_json::from_value(value).context("the data module with the size found")?;
    }
    eprintln!(
        "batch_size_find: the largest batch size that fits is {size} (budget {} MB); fit uses {section}.{name}={size}",
        budget >> 20
    );
    Ok(())
}

/// Why a trial does not fit (`None`: it fits): its process failed, or its peak resident memory
/// is over `budget` bytes.
fn verdict(finished: &Finished, budget: u64) -> Option<String> {
    match (finished.success, finished.peak_rss > budget) {
        (false, _) => Some(last_line(finished)),
        (true, true) => Some(format!(
            "peak memory {} MB over the budget",
            finished.peak_rss >> 20
        )),
        (true, false) => None,
    }
}

/// Why a trial's process failed: its last line on stderr, or the signal that ended it.
fn last_line(finished: &Finished) -> String {
    let line = finished.stderr.lines().rev().find(|l| !l.trim().is_empty());
    match (finished.code, line) {
        (None, _) => "ended by a signal (an abort: out of memory?)".into(),
        (Some(code), Some(line)) => format!("exit {code}: {}", line.trim()),
        (Some(code), None) => format!("exit {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tried(mode: ScaleMode, limit: u64, cap: u64) -> (Vec<u64>, Option<u64>) {
        let settings = BatchSizeFind {
            mode,
            ..Default::default()
        };
        let mut sizes = Vec::new();
        let found = search(&settings, cap, |size| {
            sizes.push(size);
            Ok(size <= limit)
        })
        .unwrap();
        (sizes, found)
    }

    #[test]
    fn a_trial_fits_when_it_exits_cleanly_within_the_budget() {
        let finished = |success: bool, code: Option<i32>, peak_rss: u64| Finished {
            stdout: String::new(),
            stderr: "loading\nthread 'main' panicked: out of memory\n".into(),
            success,
            code,
            peak_rss,
        };
        assert_eq!(
            verdict(&finished(true, Some(0), 100 << 20), 200 << 20),
            None
        );
        let over = verdict(&finished(true, Some(0), 300 << 20), 200 << 20).unwrap();
        assert_eq!(over, "peak memory 300 MB over the budget");
        let failed = verdict(&finished(false, Some(101), 1 << 20), 200 << 20).unwrap();
        assert_eq!(failed, "exit 101: thread 'main' panicked: out of memory");
        let aborted = verdict(&finished(false, None, 1 << 20), 200 << 20).unwrap();
        assert!(aborted.contains("signal"), "{aborted}");
    }

    #[test]
    fn sizes_double_then_bisect_as_lightning_scales() {
        // Lightning's _run_power_scaling: double until a failure, keep the last fit.
        assert_eq!(
            tried(ScaleMode::Power, 100, 10_000),
            (vec![2, 4, 8, 16, 32, 64, 128], Some(64))
        );
        // _run_binary_scaling: then halve the gap between the last fit and the failure.
        let (sizes, found) = tried(ScaleMode::Binsearch, 100, 10_000);
        assert_eq!(
            sizes,
            [2, 4, 8, 16, 32, 64, 128, 96, 112, 104, 100, 102, 101]
        );
        assert_eq!(found, Some(100));
        // Never above the training set, where a larger batch is the same batch.
        assert_eq!(
            tried(ScaleMode::Power, 10_000, 50),
            (vec![2, 4, 8, 16, 32, 50], Some(50))
        );
        // Nothing fits: halve down to 1, then give up.
        assert_eq!(tried(ScaleMode::Binsearch, 0, 10_000), (vec![2, 1], None));
    }
}
