//! `--trainer.ckpt_path=last|best|PATH`: which checkpoint an entry point starts from.
//!
//! `last` is the checkpoint with the most optimizer steps (the newest file among equals) in
//! the run's checkpoint directories: `<default_root_dir>/lightning_logs/version_*/checkpoints`,
//! `<default_root_dir>/checkpoints` and every ModelCheckpoint's `dirpath`; when there is none
//! yet, nothing is loaded (as in Lightning, so one command line serves a first run and every
//! run that continues it). `best` is the best checkpoint that the newest one's ModelCheckpoint
//! state records. Only headers are read to choose.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;

use super::checkpoint::{Checkpoint, read_header};
use crate::callbacks::CallbackStates;

/// The checkpoint a `ckpt_path` chose, and why that one.
pub struct Chosen {
    pub path: PathBuf,
    /// How `last` or `best` picked it, for the message that names it.
    pub why: String,
}

/// The checkpoint `option` names, looking for `last` and `best` in `dirs`; `None` for `last`
/// when `dirs` hold no checkpoint yet.
pub fn resolve(option: &Path, dirs: &[PathBuf]) -> anyhow::Result<Option<Chosen>> {
    match option.to_str() {
        Some("last") => Ok(newest(dirs).map(|(path, steps)| Chosen {
            path,
            why: format!(
                "the checkpoint with the most optimizer steps, {steps}, the newest file among equals"
            ),
        })),
        Some("best") => best(dirs).map(|path| {
            Some(Chosen {
                path,
                why: "the best checkpoint the newest one's ModelCheckpoint records".into(),
            })
        }),
        _ => Ok(Some(Chosen {
            path: option.to_owned(),
            why: String::new(),
        })),
    }
}

/// Where a run under `root` keeps checkpoints, besides `extra` (configured `dirpath`s).
pub fn search_dirs(root: &Path, extra: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("lightning_logs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|version| version.path().join("checkpoints"))
        .collect();
    dirs.push(root.join("checkpoints"));
    dirs.extend(extra);
    dirs
}

/// The error for `best` when `dirs` hold no checkpoint.
fn none_in(dirs: &[PathBuf]) -> anyhow::Error {
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    anyhow::anyhow!(
        "no checkpoint in {} (use best once a run has written checkpoints there)",
        dirs.join(", ")
    )
}

/// The checkpoint with the most steps (then the newest) in `dirs`, if there is one, with its
/// steps. Files that are not readable checkpoints (temporaries, torn files) are skipped.
fn newest(dirs: &[PathBuf]) -> Option<(PathBuf, u64)> {
    let mut found: Option<(u64, SystemTime, PathBuf)> = None;
    for dir in dirs {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !name.ends_with(".ckpt") {
                continue;
            }
            let header = match read_header(&path) {
                Ok(header) => header,
                Err(e) => {
                    tracing::warn!(target: "ember", "skipping {}: {e:#}", path.display());
                    continue;
                }
            };
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let candidate = (header.global_step, modified, path);
            if found
                .as_ref()
                .is_none_or(|f| (f.0, f.1) < (candidate.0, candidate.1))
            {
                found = Some(candidate);
            }
        }
    }
    found.map(|(steps, _, path)| (path, steps))
}

/// The best checkpoint recorded by the newest checkpoint's ModelCheckpoint.
fn best(dirs: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let (newest, _) = newest(dirs).ok_or_else(|| none_in(dirs))?;
    let bytes =
        std::fs::read(&newest).with_context(|| format!("cannot read {}", newest.display()))?;
    let checkpoint = Checkpoint::decode(&bytes, &newest)?;
    let states: CallbackStates = checkpoint
        .sections
        .get("callbacks")
        .map(|b| serde_json::from_slice(b))
        .transpose()?
        .unwrap_or_default();
    states
        .iter()
        .filter(|(key, _)| key.starts_with("ModelCheckpoint"))
        .filter_map(|(_, state)| {
            // Older checkpoints kept the best as a `best` [path, score] pair.
            state["best_model_path"]
                .as_str()
                .or_else(|| state["best"][0].as_str())
                .map(PathBuf::from)
        })
        .find(|path| path.is_file())
        .with_context(|| {
            format!(
                "the newest checkpoint, {}, records no best checkpoint that still exists",
                newest.display()
            )
        })
}
