//! The CSV logger: `metrics.csv` and `hparams.yaml` in the run's version directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::Logger;
use crate::checkpoint_io::{CheckpointIO, LocalCheckpointIO};

/// Writes every metrics record as a row of `metrics.csv` (columns: `step`, then the metric
/// names in order; a row leaves the metrics it lacks empty) and the hyperparameters as
/// `hparams.yaml`. The file is rewritten whole, atomically, on each save, so a new metric
/// name adds a column.
pub struct CsvLogger {
    dir: PathBuf,
    columns: BTreeSet<String>,
    rows: Vec<(u64, BTreeMap<String, f64>)>,
    dirty: bool,
}

/// Name of the metrics file.
pub const METRICS_FILE: &str = "metrics.csv";
/// Name of the hyperparameters file.
pub const HPARAMS_FILE: &str = "hparams.yaml";

impl CsvLogger {
    /// A logger writing into `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            columns: BTreeSet::new(),
            rows: Vec::new(),
            dirty: false,
        }
    }

    fn render(&self) -> anyhow::Result<Vec<u8>> {
        let mut out = csv::Writer::from_writer(Vec::new());
        out.write_record(std::iter::once("step").chain(self.columns.iter().map(String::as_str)))?;
        for (step, row) in &self.rows {
            let cells = self
                .columns
                .iter()
                .map(|c| row.get(c).map(f64::to_string).unwrap_or_default());
            out.write_record(std::iter::once(step.to_string()).chain(cells))?;
        }
        Ok(out.into_inner()?)
    }
}

/// The rows of a `metrics.csv` this logger wrote: each step with the metrics its row holds.
pub fn read_rows(path: &Path) -> anyhow::Result<Vec<(u64, BTreeMap<String, f64>)>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
    let names: Vec<String> = reader.headers()?.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for (line, record) in reader.records().enumerate() {
        let record = record?;
        let bad = || format!("{}: row {} has no step", path.display(), line + 2);
        let step = record
            .get(0)
            .and_then(|s| s.parse().ok())
            .with_context(bad)?;
        let metrics = (names.iter().zip(record.iter()).skip(1))
            .filter_map(|(name, cell)| Some((name.clone(), cell.parse().ok()?)))
            .collect();
        rows.push((step, metrics));
    }
    Ok(rows)
}

impl Logger for CsvLogger {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        let yaml = serde_yaml::to_string(hparams).context("rendering hparams.yaml")?;
        LocalCheckpointIO.save(yaml.as_bytes(), &self.dir.join(HPARAMS_FILE))
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        self.columns.extend(metrics.keys().cloned());
        self.rows.push((step, metrics.clone()));
        self.dirty = true;
        Ok(())
    }

    fn save(&mut self) -> anyhow::Result<()> {
        if self.dirty {
            LocalCheckpointIO.save(&self.render()?, &self.dir.join(METRICS_FILE))?;
            self.dirty = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_share_columns_and_leave_gaps_empty() {
        let dir = std::env::temp_dir().join(format!("ember-csv-{}", std::process::id()));
        let mut logger = CsvLogger::new(&dir);
        logger
            .log_metrics(&BTreeMap::from([("train_loss".into(), 0.5)]), 10)
            .unwrap();
        logger
            .log_metrics(
                &BTreeMap::from([("val_acc".into(), 0.75), ("epoch".into(), 0.0)]),
                12,
            )
            .unwrap();
        logger.save().unwrap();
        let text = std::fs::read_to_string(dir.join(METRICS_FILE)).unwrap();
        assert_eq!(
            text,
            "step,epoch,train_loss,val_acc\n10,,0.5,\n12,0,,0.75\n"
        );
        let rows = read_rows(&dir.join(METRICS_FILE)).unwrap();
        assert_eq!(rows, logger.rows, "read back as written");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
