//! ModelCheckpoint: save checkpoints during `fit`, keeping the best `save_top_k` by a metric.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::on_exception::save_on_failure;
use super::{Callback, CallbackContext, Mode, TrainerState, checkpoint_dir};
use crate::error::list;

/// ModelCheckpoint's settings (`init_args` in config).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelCheckpointConfig {
    /// Directory for the files (default: `<log_dir>/checkpoints`, or `<root>/checkpoints`
    /// without a logger).
    pub dirpath: Option<PathBuf>,
    /// File name template without extension: `{epoch}`, `{step}` and `{METRIC}` become
    /// `epoch=3`, `step=120`, `METRIC=0.1234` (default: `{epoch}-{step}`); a `/` in a
    /// metric's name (`val_loss/dataloader_idx_1`) is written `_`, so the file stays in
    /// `dirpath`.
    pub filename: Option<String>,
    /// The metric that ranks checkpoints; none keeps the latest ones.
    pub monitor: Option<String>,
    /// Whether lower or higher `monitor` is better.
    pub mode: Mode,
    /// How many to keep: the k best (or latest), 0 for none, -1 for all.
    pub save_top_k: i64,
    /// Also write `last.ckpt` at every save point.
    pub save_last: bool,
    /// Save every N epochs.
    pub every_n_epochs: u64,
    /// When `fit` fails, also save a checkpoint of the last completed step under the file
    /// name the template gives then (and `last.ckpt` with `save_last`), as
    /// OnExceptionCheckpoint does (Lightning 2.5's `save_on_exception`); it takes no part in
    /// the top k.
    pub save_on_exception: bool,
}

impl Default for ModelCheckpointConfig {
    fn default() -> Self {
        Self {
            dirpath: None,
            filename: None,
            monitor: None,
            mode: Mode::Min,
            save_top_k: 1,
            save_last: false,
            every_n_epochs: 1,
            save_on_exception: false,
        }
    }
}

/// Saves checkpoints at the end of validation (or of the training epoch when there is no
/// validation), keeping the `save_top_k` best by `monitor`.
/// Everything but the config and the rank is its checkpointed state (Lightning's `state_dict`).
///
/// A fit resumed from a checkpoint written in another folder (the usual case: each run has its
/// own `version_N`) restores only `best_model_path`, as Lightning does: the top-k files, the best
/// score and the last path belong to that folder, and rotating them would delete another run's
/// checkpoints. It only ever deletes files in the folder it writes to.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct ModelCheckpoint {
    #[serde(skip)]
    config: ModelCheckpointConfig,
    /// Whether this process reports (rank 0), known from `setup`.
    #[serde(skip)]
    is_global_zero: bool,
    /// The folder this callback writes to, resolved at `setup` (Lightning's `dirpath`).
    #[serde(default)]
    dirpath: Option<PathBuf>,
    kept: Vec<(PathBuf, f64)>,
    last_saved_step: Option<u64>,
    /// The best checkpoint so far (restored whatever folder it is in).
    #[serde(default)]
    best_model_path: Option<PathBuf>,
    /// Its monitored value (restored only with the folder's other state).
    #[serde(default)]
    best_model_score: Option<f64>,
    /// The most recent checkpoint written.
    pub last_model_path: Option<PathBuf>,
}

impl ModelCheckpoint {
    /// A ModelCheckpoint with these settings.
    pub fn new(config: ModelCheckpointConfig) -> Self {
        Self {
            config,
            is_global_zero: true,
            dirpath: None,
            kept: Vec::new(),
            last_saved_step: None,
            best_model_path: None,
            best_model_score: None,
            last_model_path: None,
        }
    }

    /// The kept checkpoints with their monitored values (the step, without a monitor).
    pub fn kept(&self) -> &[(PathBuf, f64)] {
        &self.kept
    }

    /// The best monitored value so far.
    pub fn best_model_score(&self) -> Option<f64> {
        self.best_model_score
    }

    fn dir(&self, state: &TrainerState) -> PathBuf {
        checkpoint_dir(self.config.dirpath.as_deref(), state)
    }

    fn file_name(&self, state: &TrainerState) -> String {
        let template = self.config.filename.as_deref().unwrap_or("{epoch}-{step}");
        let mut name = String::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            name.push_str(&rest[..open]);
            let Some(close) = rest[open..].find('}') else {
                break;
            };
            let key = &rest[open + 1..open + close];
            match key {
                "epoch" => name.push_str(&format!("epoch={}", state.epoch)),
                "step" => name.push_str(&format!("step={}", state.global_step)),
                metric => match state.callback_metrics.get(metric) {
                    Some(v) => name.push_str(&format!("{}={v:.4}", metric.replace('/', "_"))),
                    None => name.push_str(&metric.replace('/', "_")),
                },
            }
            rest = &rest[open + close + 1..];
        }
        name.push_str(rest);
        format!("{name}.ckpt")
    }

    /// The ranking: by `monitor` in `mode`, or newest first without a monitor.
    fn ranking(&self) -> Mode {
        if self.config.monitor.is_some() {
            self.config.mode
        } else {
            Mode::Max
        }
    }

    /// Whether a value ranks among the kept ones (or there is room).
    fn qualifies(&self, score: f64) -> bool {
        let k = self.config.save_top_k;
        if k < 0 || (self.kept.len() as i64) < k {
            return true;
        }
        self.worst()
            .is_some_and(|(_, worst)| self.ranking().improves(score, worst, 0.0))
    }

    fn worst(&self) -> Option<(usize, f64)> {
        self.kept
            .iter()
            .enumerate()
            .map(|(i, (_, s))| (i, *s))
            .reduce(|a, b| {
                if self.ranking().improves(a.1, b.1, 0.0) {
                    b
                } else {
                    a
                }
            })
    }

    fn save(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let state = &*ctx.state;
        if !state.is_global_zero
            || state.fast_dev_run
            || self.last_saved_step == Some(state.global_step)
            || !(state.epoch + 1).is_multiple_of(self.config.every_n_epochs.max(1))
        {
            return Ok(());
        }
        self.last_saved_step = Some(state.global_step);
        let dir = self.dir(state);
        self.dirpath = Some(dir.clone());
        let score = match &self.config.monitor {
            Some(m) => *state.callback_metrics.get(m).ok_or_else(|| {
                anyhow::anyhow!(
                    "ModelCheckpoint could not find monitor `{m}` among the logged metrics ({})",
                    list(state.callback_metrics.keys())
                )
            })?,
            None => state.global_step as f64,
        };
        let mode = self.ranking();
        if self.config.save_top_k != 0 && self.qualifies(score) {
            let path = dir.join(self.file_name(state));
            self.kept.retain(|(p, _)| p != &path);
            self.kept.push((path.clone(), score));
            let mut evicted = Vec::new();
            let k = self.config.save_top_k;
            while k >= 0 && self.kept.len() as i64 > k {
                let (i, _) = self.worst().expect("kept is not empty");
                evicted.push(self.kept.remove(i).0);
            }
            if self
                .best_model_score
                .is_none_or(|b| mode.improves(score, b, 0.0))
            {
                self.best_model_path = Some(path.clone());
                self.best_model_score = Some(score);
            }
            self.last_model_path = Some(path.clone());
            // The checkpoint records this callback as it is after the save.
            if let Some(own) = self.state() {
                ctx.record_own_state(self.state_key(), own);
            }
            ctx.save_checkpoint(&path)?;
            // Never another folder's file, whatever the restored state says.
            for old in evicted.iter().filter(|old| old.parent() == Some(&dir)) {
                ctx.remove_checkpoint(old)?;
            }
        }
        if self.config.save_last {
            let path = dir.join("last.ckpt");
            self.last_model_path = Some(path.clone());
            if let Some(own) = self.state() {
                ctx.record_own_state(self.state_key(), own);
            }
            ctx.save_checkpoint(&path)?;
        }
        Ok(())
    }
}

impl Callback for ModelCheckpoint {
    fn name(&self) -> &str {
        "ModelCheckpoint"
    }

    fn state_key(&self) -> String {
        format!(
            "ModelCheckpoint{{monitor={},mode={:?},dirpath={},filename={}}}",
            self.config.monitor.as_deref().unwrap_or(""),
            self.config.mode,
            self.config
                .dirpath
                .as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            self.config.filename.as_deref().unwrap_or("")
        )
    }

    fn state(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self).ok()
    }

    fn setup(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.is_global_zero = ctx.state.is_global_zero;
        self.dirpath = Some(self.dir(ctx.state));
        Ok(())
    }

    fn load_state(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        let saved: Self = serde_json::from_value(state.clone())?;
        let same_folder = match (&self.dirpath, &saved.dirpath) {
            (Some(now), Some(then)) => same_dir(now, then),
            _ => false,
        };
        if same_folder {
            *self = Self {
                config: self.config.clone(),
                is_global_zero: self.is_global_zero,
                ..saved
            };
            return Ok(());
        }
        if self.is_global_zero {
            tracing::warn!(
                target: "ember",
                "ModelCheckpoint: the checkpoint was written to {} and this run writes to {}: its top-k files, best score and last path are not restored (only best_model_path), and none of its files will be removed",
                saved.dirpath.as_deref().map_or("an unrecorded folder".into(), |d| d.display().to_string()),
                self.dirpath.as_deref().map_or("?".into(), |d| d.display().to_string()),
            );
        }
        self.best_model_path = saved.best_model_path;
        Ok(())
    }

    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        if ctx.state.sanity_checking {
            return Ok(());
        }
        self.save(ctx)
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.save(ctx)
    }

    fn on_exception(&mut self, ctx: &mut CallbackContext<'_>, error: &anyhow::Error) {
        // As Lightning's, not for a failure in the sanity check, before training began.
        if !self.config.save_on_exception || ctx.state.sanity_checking {
            return;
        }
        let dir = self.dir(ctx.state);
        let mut paths = vec![dir.join(self.file_name(ctx.state))];
        if self.config.save_last {
            paths.push(dir.join("last.ckpt"));
        }
        for path in paths {
            save_on_failure(ctx, &path, error, "ModelCheckpoint");
        }
    }

    fn is_model_checkpoint(&self) -> bool {
        true
    }

    fn checkpoint_dirpath(&self) -> Option<PathBuf> {
        self.config.dirpath.clone()
    }

    fn best_model_path(&self) -> Option<PathBuf> {
        self.best_model_path
            .clone()
            .or_else(|| self.last_model_path.clone())
    }
}

/// Whether two spellings name one folder (relative paths are taken from the working
/// directory; the folder need not exist yet).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::path::absolute(a), std::path::absolute(b)) {
        (Ok(a), Ok(b)) => a.components().eq(b.components()),
        _ => a == b,
    }
}
