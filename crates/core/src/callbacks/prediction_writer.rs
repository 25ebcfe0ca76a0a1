//! Prediction writers (Lightning's `BasePredictionWriter`): `predict`'s results handed to code
//! that writes them, per batch as they are made or all at once at the end of the pass, each
//! rank its own, instead of collected in memory and returned.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Callback, CallbackContext};
use crate::error::{FlagError, PlanResult};
use crate::stage::Stage;

/// One predicted batch, as `on_predict_batch_end` and `on_predict_epoch_end` get it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedBatch {
    /// The predict loader it came from (Lightning's `dataloader_idx`; 0 with one).
    pub dataloader_idx: usize,
    /// Its index among its loader's batches, counted across every rank (rank 1's first batch
    /// follows rank 0's last).
    pub batch_idx: usize,
    /// The dataset indices of the items the batch was made from, in order (Lightning's
    /// `batch_indices`); an item a loader with `skip_failed_items` skipped is still listed.
    pub batch_indices: Vec<usize>,
    /// What `predict_step` returned for it.
    pub prediction: Value,
}

/// When a [`PredictionWriter`] writes (Lightning's `write_interval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteInterval {
    /// After each batch, as it is predicted: memory holds one batch's predictions.
    #[default]
    Batch,
    /// Once, after every predict loader has run, with all of this rank's predictions (which
    /// are then kept until that point).
    Epoch,
    /// Both.
    BatchAndEpoch,
}

impl WriteInterval {
    /// Whether it writes after each batch.
    pub fn on_batch(self) -> bool {
        matches!(self, Self::Batch | Self::BatchAndEpoch)
    }

    /// Whether it writes at the end of the pass.
    pub fn on_epoch(self) -> bool {
        matches!(self, Self::Epoch | Self::BatchAndEpoch)
    }
}

/// How predictions are written: implement the method for the interval the writer is given.
/// Every rank writes its own share (the context's `state.global_rank` tells them apart).
#[allow(unused_variables)]
pub trait WritePredictions {
    /// Writes one batch's prediction, just made.
    fn write_on_batch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// Writes all of this rank's predictions, of every predict loader, in order.
    fn write_on_epoch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        predictions: &[PredictedBatch],
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// After the pass, whether it succeeded or not: closes what the writer opened.
    fn finish(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        Ok(())
    }
}

/// The callback that hands `predict`'s results to a [`WritePredictions`] at its interval.
/// With `--trainer.return_predictions=false` nothing else keeps them, so memory stays bounded
/// by a batch's predictions when it writes per batch.
pub struct PredictionWriter<W> {
    writer: W,
    interval: WriteInterval,
}

impl<W: WritePredictions> PredictionWriter<W> {
    /// A callback that calls `writer` at `interval`.
    pub fn new(writer: W, interval: WriteInterval) -> Self {
        Self { writer, interval }
    }

    /// The writer, e.g. to read what it wrote after `predict`.
    pub fn writer(&self) -> &W {
        &self.writer
    }
}

impl<W: WritePredictions> Callback for PredictionWriter<W> {
    fn name(&self) -> &str {
        "PredictionWriter"
    }

    fn keeps_predictions(&self) -> bool {
        self.interval.on_epoch()
    }

    fn on_predict_batch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        match self.interval.on_batch() {
            true => self.writer.write_on_batch_end(ctx, batch),
            false => Ok(()),
        }
    }

    fn on_predict_epoch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        predictions: &[PredictedBatch],
    ) -> anyhow::Result<()> {
        match self.interval.on_epoch() {
            true => self.writer.write_on_epoch_end(ctx, predictions),
            false => Ok(()),
        }
    }

    fn teardown(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        match ctx.state.stage {
            Some(Stage::Predict) => self.writer.finish(ctx),
            _ => Ok(()),
        }
    }
}

/// The built-in writer's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonLinesConfig {
    /// The directory the files go to (made when missing).
    pub output_dir: PathBuf,
    /// `batch`: each batch's line is written as it is predicted; `epoch`: every line at the
    /// end of the pass.
    #[serde(default)]
    pub write_interval: WriteInterval,
}

/// A writer of JSON lines, one file per rank (`<output_dir>/predictions-rank<N>.jsonl`), a
/// line per batch: a [`PredictedBatch`] as JSON. The file is started afresh by each `predict`.
#[derive(Debug)]
pub struct JsonLinesWriter {
    dir: PathBuf,
    file: Option<(PathBuf, BufWriter<File>)>,
}

impl JsonLinesWriter {
    /// A writer into `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, file: None }
    }

    /// The callback for `config`; `batch_and_epoch` is refused (it would write each line twice).
    pub fn callback(config: JsonLinesConfig) -> PlanResult<PredictionWriter<Self>> {
        if config.write_interval == WriteInterval::BatchAndEpoch {
            return Err(FlagError::new(
                "--trainer.callbacks",
                "batch_and_epoch",
                "the PredictionWriter's write_interval must be batch or epoch (it writes each batch once)",
            ));
        }
        Ok(PredictionWriter::new(
            Self::new(config.output_dir),
            config.write_interval,
        ))
    }

    /// The file of rank `rank`.
    pub fn path(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("predictions-rank{rank}.jsonl"))
    }

    /// Writes `batch`'s line to this rank's file, creating it (emptied) first when this
    /// `predict` has not written yet.
    fn write_line(&mut self, rank: usize, batch: &PredictedBatch) -> anyhow::Result<()> {
        if self.file.is_none() {
            let path = self.path(rank);
            std::fs::create_dir_all(&self.dir)
                .with_context(|| format!("creating {}", self.dir.display()))?;
            let file =
                File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            self.file = Some((path, BufWriter::new(file)));
        }
        let (path, file) = self.file.as_mut().expect("opened above");
        let written = (|| {
            serde_json::to_writer(&mut *file, batch)?;
            file.write_all(b"\n")
        })();
        written.with_context(|| format!("writing {}", path.display()))
    }
}

impl WritePredictions for JsonLinesWriter {
    fn write_on_batch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        batch: &PredictedBatch,
    ) -> anyhow::Result<()> {
        self.write_line(ctx.state.global_rank, batch)
    }

    fn write_on_epoch_end(
        &mut self,
        ctx: &mut CallbackContext<'_>,
        predictions: &[PredictedBatch],
    ) -> anyhow::Result<()> {
        for batch in predictions {
            self.write_line(ctx.state.global_rank, batch)?;
        }
        Ok(())
    }

    /// Flushes this `predict`'s file and closes it.
    fn finish(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        match self.file.take() {
            Some((path, mut file)) => file
                .flush()
                .with_context(|| format!("writing {}", path.display())),
            None => Ok(()),
        }
    }
}
