//! The checkpoint file: a small versioned header and named sections of burn records.
//!
//! Layout: the 8 bytes `EMBERCKP`, a little-endian `u32` header length, the header's CRC-32C
//! (`u32`), the header as JSON ([`CheckpointHeader`], which holds each section's length and
//! CRC-32C), then each section's bytes in the header's order. Sections hold
//! burn records (named MessagePack, full precision): `model`, and `optimizer` when saved
//! during `fit`. Reading checks the magic, the checksums, the format version and every
//! length, and names the file and what is wrong.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail, ensure};
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

/// The first bytes of every checkpoint.
pub const MAGIC: &[u8; 8] = b"EMBERCKP";
/// The format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// What a checkpoint says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointHeader {
    /// File format version.
    pub format_version: u32,
    /// The ember version that wrote it.
    pub ember_version: String,
    /// Epoch in which it was written (0-based).
    pub epoch: u64,
    /// Optimizer steps taken when it was written.
    pub global_step: u64,
    /// Training batches completed in `epoch` when it was written.
    #[serde(default)]
    pub batches_done: u64,
    /// The learning rate of the latest optimizer step.
    #[serde(default)]
    pub learning_rate: f64,
    /// The metrics known when it was written.
    pub metrics: BTreeMap<String, f64>,
    /// Section names, byte lengths and CRC-32C checksums, in file order.
    pub sections: Vec<(String, u64, u32)>,
}

/// Where training stood when a checkpoint was written.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    /// Epoch (0-based).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// Training batches completed in `epoch`.
    pub batches_done: u64,
    /// The learning rate of the latest optimizer step.
    pub learning_rate: f64,
}

/// A decoded checkpoint: header and section bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The header.
    pub header: CheckpointHeader,
    /// The sections by name.
    pub sections: BTreeMap<String, Vec<u8>>,
}

fn recorder() -> NamedMpkBytesRecorder<FullPrecisionSettings> {
    NamedMpkBytesRecorder::default()
}

/// A burn record as section bytes.
pub fn record_bytes<B: Backend, R: Record<B>>(record: R) -> anyhow::Result<Vec<u8>> {
    Recorder::<B>::record(&recorder(), record, ()).context("serialising a record")
}

/// A burn record from section bytes.
pub fn record_from_bytes<B: Backend, R: Record<B>>(
    bytes: Vec<u8>,
    device: &B::Device,
) -> anyhow::Result<R> {
    Recorder::<B>::load(&recorder(), bytes, device).context("decoding a record")
}

/// Bytes before the header: magic, header length, header checksum.
const PREFIX: usize = 16;

/// CRC-32C with slice-by-16 tables (built at compile time): a checkpoint's megabytes are
/// checksummed on every save and load.
const CASTAGNOLI: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

fn crc32(bytes: &[u8]) -> u32 {
    CASTAGNOLI.checksum(bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl Checkpoint {
    /// Encodes header and sections into file bytes.
    pub fn encode(
        progress: Progress,
        metrics: BTreeMap<String, f64>,
        sections: Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<Vec<u8>> {
        let header = CheckpointHeader {
            format_version: FORMAT_VERSION,
            ember_version: env!("CARGO_PKG_VERSION").to_owned(),
            epoch: progress.epoch,
            global_step: progress.global_step,
            batches_done: progress.batches_done,
            learning_rate: progress.learning_rate,
            metrics,
            sections: sections
                .iter()
                .map(|(n, b)| (n.clone(), b.len() as u64, crc32(b)))
                .collect(),
        };
        Self::encode_header(&header, &sections)
    }

    fn encode_header(
        header: &CheckpointHeader,
        sections: &[(String, Vec<u8>)],
    ) -> anyhow::Result<Vec<u8>> {
        let json = serde_json::to_vec(header)?;
        let mut out = Vec::with_capacity(
            PREFIX + json.len() + sections.iter().map(|(_, b)| b.len()).sum::<usize>(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&u32::try_from(json.len())?.to_le_bytes());
        out.extend_from_slice(&crc32(&json).to_le_bytes());
        out.extend_from_slice(&json);
        for (_, bytes) in sections {
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }

    /// Decodes file bytes; `path` is only for messages. Checks the magic, the header's and
    /// every section's CRC-32C, the format version and every length.
    pub fn decode(bytes: &[u8], path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        ensure!(
            bytes.len() >= 8 && &bytes[..8] == MAGIC,
            "{shown} is not an ember checkpoint (no EMBERCKP header)"
        );
        ensure!(
            bytes.len() >= PREFIX,
            "{shown} is truncated: its header is cut short"
        );
        let len = u32_at(bytes, 8) as usize;
        let Some(json) = bytes.get(PREFIX..PREFIX + len) else {
            bail!("{shown} is truncated: its header is cut short");
        };
        ensure!(
            crc32(json) == u32_at(bytes, 12),
            "{shown} has a corrupt header (checksum mismatch: damaged or flipped bytes)"
        );
        let header: CheckpointHeader = serde_json::from_slice(json)
            .with_context(|| format!("{shown} has a corrupt header"))?;
        ensure!(
            header.format_version == FORMAT_VERSION,
            "{shown} has checkpoint format version {}, this ember reads version {FORMAT_VERSION}",
            header.format_version
        );
        let mut offset = PREFIX + len;
        let mut sections = BTreeMap::new();
        for (name, size, crc) in &header.sections {
            let end = offset.saturating_add(*size as usize);
            let Some(data) = bytes.get(offset..end) else {
                bail!("{shown} is truncated: section `{name}` needs {size} bytes");
            };
            ensure!(
                crc32(data) == *crc,
                "{shown}: section `{name}` fails its checksum (damaged or flipped bytes)"
            );
            sections.insert(name.clone(), data.to_vec());
            offset = end;
        }
        ensure!(
            offset == bytes.len(),
            "{shown} has {} unexpected bytes after its last section",
            bytes.len() - offset
        );
        Ok(Self { header, sections })
    }

    /// The loss scaler's state, when the run had one (16-mixed).
    pub fn grad_scaler(
        &self,
        path: &Path,
    ) -> anyhow::Result<Option<crate::trainer::scaler::GradScaler>> {
        self.sections
            .get("grad_scaler")
            .map(|bytes| serde_json::from_slice(bytes))
            .transpose()
            .with_context(|| format!("{}: corrupt grad_scaler section", path.display()))
    }

    /// Decodes the burn record in section `name`.
    pub fn record<B: Backend, R: Record<B>>(
        &self,
        name: &str,
        device: &B::Device,
        path: &Path,
    ) -> anyhow::Result<R> {
        let bytes = self
            .sections
            .get(name)
            .with_context(|| format!("{} has no {name} section", path.display()))?;
        record_from_bytes::<B, R>(bytes.clone(), device)
            .with_context(|| format!("{}: the {name} section does not fit", path.display()))
    }

    /// Loads the `model` section into `model`'s weights.
    pub fn load_model<B: Backend, M: Module<B>>(
        &self,
        model: M,
        device: &B::Device,
        path: &Path,
    ) -> anyhow::Result<M> {
        Ok(model.load_record(self.record::<B, M::Record>("model", device, path)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_clear_errors() {
        let path = Path::new("x.ckpt");
        let progress = Progress {
            epoch: 2,
            global_step: 40,
            ..Progress::default()
        };
        let bytes = Checkpoint::encode(
            progress,
            BTreeMap::from([("val_acc".into(), 0.5)]),
            vec![
                ("model".into(), vec![1, 2, 3]),
                ("optimizer".into(), vec![9]),
            ],
        )
        .unwrap();
        let ck = Checkpoint::decode(&bytes, path).unwrap();
        assert_eq!(ck.header.global_step, 40);
        assert_eq!(ck.sections["model"], vec![1, 2, 3]);
        let e = Checkpoint::decode(&bytes[..bytes.len() - 1], path).unwrap_err();
        assert!(e.to_string().contains("x.ckpt is truncated"), "{e}");
        let e = Checkpoint::decode(b"PK\x03\x04 not a checkpoint", path).unwrap_err();
        assert!(e.to_string().contains("not an ember checkpoint"), "{e}");
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x10;
        let e = Checkpoint::decode(&flipped, path).unwrap_err();
        assert!(
            e.to_string()
                .contains("section `optimizer` fails its checksum"),
            "{e}"
        );
        let mut flipped = bytes.clone();
        flipped[PREFIX + 3] ^= 0x01;
        let e = Checkpoint::decode(&flipped, path).unwrap_err();
        assert!(e.to_string().contains("corrupt header"), "{e}");
        let mut future = ck.header.clone();
        future.format_version = 9;
        let sections: Vec<(String, Vec<u8>)> = ck.sections.clone().into_iter().collect();
        let wrong = Checkpoint::encode_header(&future, &sections).unwrap();
        let e = Checkpoint::decode(&wrong, path).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
    }
}
