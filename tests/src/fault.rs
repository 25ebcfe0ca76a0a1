//! ACCEPTANCE 30: a checkpoint write killed at any instant leaves the previous checkpoint
//! loadable. A writer process saves checkpoints in a loop (through `LocalCheckpointIO`,
//! rotating files as ModelCheckpoint does); the harness SIGKILLs it at random moments and then
//! decodes every checkpoint file left in the directory.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, ensure};
use ember::checkpoint::Checkpoint;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Bytes in each checkpoint's payload: large enough that kills land mid-write.
pub const PAYLOAD: usize = 4 << 20;

/// The payload of the checkpoint of step `step`: every byte depends on the step, so a file
/// mixing two writes is detected. Cheap to make, so the writer spends its time writing.
pub fn payload(step: u64) -> Vec<u8> {
    vec![(step % 251) as u8; PAYLOAD]
}

/// The steps of the checkpoint files in `dir` (dot-files are unfinished temporaries), each
/// decoded and checked against its expected payload. Any damaged file is an error.
pub fn verify(dir: &Path) -> anyhow::Result<Vec<u64>> {
    let mut steps = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') || !name.ends_with(".ckpt") {
            continue;
        }
        let bytes = std::fs::read(&path)?;
        let checkpoint = Checkpoint::decode(&bytes, &path)?;
        let step = checkpoint.header.global_step;
        ensure!(
            checkpoint.sections.get("model") == Some(&payload(step)),
            "{} holds a damaged payload",
            path.display()
        );
        steps.push(step);
    }
    steps.sort_unstable();
    Ok(steps)
}

/// Set on the writer to write files in place (no temp file, no rename): the control that
/// shows the harness catches torn writes.
pub const DIRECT_WRITES: &str = "EMBER_FAULT_DIRECT_WRITES";

/// Runs the writer `runs` times, killing it at a random moment after its first complete
/// checkpoint; returns how many runs left a newest checkpoint that loads. `direct` makes the
/// writer skip the atomic protocol.
pub fn kill_runs(writer: &Path, runs: usize, seed: u64, direct: bool) -> anyhow::Result<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut loadable = 0;
    for run in 0..runs {
        let dir = tempfile::tempdir()?;
        let mut command = Command::new(writer);
        if direct {
            command.env(DIRECT_WRITES, "1");
        }
        let mut child = command
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", writer.display()))?;
        // Keep reading the writer's stdout until it is killed, so it never dies of a closed pipe.
        let mut progress = BufReader::new(child.stdout.take().context("writer stdout")?);
        let mut first = String::new();
        progress.read_line(&mut first)?;
        ensure!(first.starts_with("saved 0"), "writer said {first:?}");
        std::thread::sleep(Duration::from_micros(rng.random_range(0..40_000)));
        ensure!(
            child.try_wait()?.is_none(),
            "the writer exited before it was killed"
        );
        child.kill()?;
        child.wait()?;
        drop(progress);
        match verify(dir.path()) {
            Ok(steps) if !steps.is_empty() => loadable += 1,
            Ok(_) => eprintln!("run {run}: no checkpoint left"),
            Err(e) => eprintln!("run {run}: {e:#}"),
        }
    }
    Ok(loadable)
}
