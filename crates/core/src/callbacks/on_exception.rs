//! OnExceptionCheckpoint: a checkpoint when `fit` fails, so that a crash loses no progress
//! (Lightning's callback of that name).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Callback, CallbackContext, checkpoint_dir};
use crate::stage::Stage;

/// OnExceptionCheckpoint's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OnExceptionCheckpointConfig {
    /// Where the checkpoint goes; `None`: the run's checkpoint directory
    /// (`<log_dir>/checkpoints`, or `<default_root_dir>/checkpoints` without a logger), where
    /// `--trainer.ckpt_path=last` finds it.
    pub dirpath: Option<PathBuf>,
    /// The file's name without `.ckpt`.
    pub filename: String,
}

impl Default for OnExceptionCheckpointConfig {
    fn default() -> Self {
        Self {
            dirpath: None,
            filename: "on_exception".into(),
        }
    }
}

/// When `fit` fails, saves a checkpoint of the last completed step (global rank 0 writes it)
/// and says where: after an error from the data, a callback, validation or a logger, or a
/// panic in `training_step`. A failure inside the optimizer step, which holds the model then,
/// and a strategy that shards the optimizer's state (gathering it needs every rank) leave no
/// checkpoint, and say so. Resuming from the checkpoint continues where the run failed.
#[derive(Debug, Clone, Default)]
pub struct OnExceptionCheckpoint {
    config: OnExceptionCheckpointConfig,
}

impl OnExceptionCheckpoint {
    /// A callback with these settings.
    pub fn new(config: OnExceptionCheckpointConfig) -> Self {
        Self { config }
    }
}

impl Callback for OnExceptionCheckpoint {
    fn name(&self) -> &str {
        "OnExceptionCheckpoint"
    }

    fn checkpoint_dirpath(&self) -> Option<PathBuf> {
        self.config.dirpath.clone()
    }

    fn on_exception(&mut self, ctx: &mut CallbackContext<'_>, error: &anyhow::Error) {
        let dir = checkpoint_dir(self.config.dirpath.as_deref(), ctx.state);
        let path = dir.join(format!("{}.ckpt", self.config.filename));
        save_on_failure(ctx, &path, error, "OnExceptionCheckpoint");
    }
}

/// Saves a checkpoint of the last completed step of a failed `fit` to `path` (global rank 0,
/// not in a fast dev run) and says where, or why `who` saved nothing.
pub(super) fn save_on_failure(
    ctx: &mut CallbackContext<'_>,
    path: &Path,
    error: &anyhow::Error,
    who: &str,
) {
    let state = &*ctx.state;
    let fitting = state.stage == Some(Stage::Fit);
    if !state.is_global_zero || state.fast_dev_run || !fitting {
        return;
    }
    let step = state.global_step;
    if !ctx.can_save() {
        eprintln!(
            "fit failed ({error}); {who} saved nothing: the failure came inside the optimizer step, which held the model, or the strategy shards the optimizer state across the ranks"
        );
        return;
    }
    match ctx.save_checkpoint(path) {
        Ok(()) => eprintln!(
            "fit failed ({error}); {who} saved the checkpoint of step {step} as {}: resume with --trainer.ckpt_path={}",
            path.display(),
            path.display()
        ),
        Err(e) => eprintln!("fit failed ({error}); {who} saved nothing: {e:#}"),
    }
}
