//! The TensorBoard logger: scalars in a TensorBoard event file (`events.out.tfevents.*`).
//!
//! An event file is a TFRecord stream: each record is its length (`u64` LE), a masked CRC-32C
//! of the length, the bytes of one `Event` protobuf, and a masked CRC-32C of those bytes. The
//! first event carries the file version; each `log_metrics` call writes one event whose
//! `Summary` holds one `simple_value` per metric. The few protobuf fields involved are encoded
//! here by hand (a generated protobuf stack would outweigh them); the tests read the files
//! back with TensorBoard's own reader.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use crc::{CRC_32_ISCSI, Crc};
use serde_json::Value;

use super::Logger;
use crate::checkpoint_io::{CheckpointIO, LocalCheckpointIO};
use crate::loggers::csv_logger::HPARAMS_FILE;

const CASTAGNOLI: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// The CRC TFRecord stores: CRC-32C, rotated and offset.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = CASTAGNOLI.checksum(bytes);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// An `Event` with wall time, step, and either a file version or a summary of scalars.
fn event(
    wall_time: f64,
    step: u64,
    file_version: Option<&str>,
    scalars: &BTreeMap<String, f64>,
) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, 1 << 3 | 1);
    out.extend_from_slice(&wall_time.to_le_bytes());
    varint(&mut out, 2 << 3);
    varint(&mut out, step);
    if let Some(version) = file_version {
        bytes_field(&mut out, 3, version.as_bytes());
    }
    if !scalars.is_empty() {
        let mut summary = Vec::new();
        for (tag, value) in scalars {
            let mut v = Vec::new();
            bytes_field(&mut v, 1, tag.as_bytes());
            varint(&mut v, 2 << 3 | 5);
            v.extend_from_slice(&(*value as f32).to_le_bytes());
            bytes_field(&mut summary, 1, &v);
        }
        bytes_field(&mut out, 5, &summary);
    }
    out
}

/// Writes scalars to `<log_dir>/events.out.tfevents.<seconds>.<host>.<pid>`.
pub struct TensorBoardLogger {
    dir: PathBuf,
    path: PathBuf,
    file: BufWriter<File>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl TensorBoardLogger {
    /// A logger writing a new event file in `dir`.
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        let host = hostname();
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.{}",
            now() as u64,
            std::process::id()
        ));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut logger = Self {
            dir: dir.to_owned(),
            path,
            file: BufWriter::new(file),
        };
        logger.record(&event(now(), 0, Some("brain.Event:2"), &BTreeMap::new()))?;
        Ok(logger)
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn record(&mut self, data: &[u8]) -> anyhow::Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        self.file.write_all(&len)?;
        self.file.write_all(&masked_crc(&len).to_le_bytes())?;
        self.file.write_all(data)?;
        self.file.write_all(&masked_crc(data).to_le_bytes())?;
        Ok(())
    }
}

/// The host name for the file name, as TensorBoard's writers use it (`localhost` if unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        })
        .unwrap_or_else(|| "localhost".into())
}

impl Logger for TensorBoardLogger {
    fn log_hyperparams(&mut self, hparams: &Value) -> anyhow::Result<()> {
        let yaml = serde_yaml::to_string(hparams).context("rendering hparams.yaml")?;
        LocalCheckpointIO.save(yaml.as_bytes(), &self.dir.join(HPARAMS_FILE))
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        self.record(&event(now(), step, None, metrics))
            .with_context(|| format!("writing {}", self.path.display()))
    }

    fn save(&mut self) -> anyhow::Result<()> {
        self.file
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // CRC-32C("123456789") is 0xE3069283 (the standard check value).
        assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xE306_9283);
        let crc: u32 = 0xE306_9283;
        assert_eq!(
            masked_crc(b"123456789"),
            crc.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn varints_encode_like_protobuf() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xAC, 0x02]);
    }
}
