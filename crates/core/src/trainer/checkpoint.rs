//! The checkpoint file: a small versioned header and named sections of burn records.
//!
//! Layout: the 8 bytes `EMBERCKP`, a little-endian `u32` header length, the header as JSON
//! ([`CheckpointHeader`]), then each section's bytes in the header's order. Sections hold
//! burn records (named MessagePack, full precision): `model`, and `optimizer` when saved
//! during `fit`. Reading checks the magic, the format version and every length, and names
//! the file and what is wrong.

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
    /// The metrics known when it was written.
    pub metrics: BTreeMap<String, f64>,
    /// Section names and byte lengths, in file order.
    pub sections: Vec<(String, u64)>,
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

impl Checkpoint {
    /// Encodes header and sections into file bytes.
    pub fn encode(
        epoch: u64,
        global_step: u64,
        metrics: BTreeMap<String, f64>,
        sections: Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<Vec<u8>> {
        let header = CheckpointHeader {
            format_version: FORMAT_VERSION,
            ember_version: env!("CARGO_PKG_VERSION").to_owned(),
            epoch,
            global_step,
            metrics,
            sections: sections
                .iter()
                .map(|(n, b)| (n.clone(), b.len() as u64))
                .collect(),
        };
        let json = serde_json::to_vec(&header)?;
        let mut out = Vec::with_capacity(
            12 + json.len() + sections.iter().map(|(_, b)| b.len()).sum::<usize>(),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&u32::try_from(json.len())?.to_le_bytes());
        out.extend_from_slice(&json);
        for (_, bytes) in sections {
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }

    /// Decodes file bytes; `path` is only for messages.
    pub fn decode(bytes: &[u8], path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        ensure!(
            bytes.len() >= 12 && &bytes[..8] == MAGIC,
            "{shown} is not an ember checkpoint (no EMBERCKP header)"
        );
        let len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let Some(json) = bytes.get(12..12 + len) else {
            bail!("{shown} is truncated: its header is cut short");
        };
        let header: CheckpointHeader = serde_json::from_slice(json)
            .with_context(|| format!("{shown} has a corrupt header"))?;
        ensure!(
            header.format_version == FORMAT_VERSION,
            "{shown} has checkpoint format version {}, this ember reads version {FORMAT_VERSION}",
            header.format_version
        );
        let mut offset = 12 + len;
        let mut sections = BTreeMap::new();
        for (name, size) in &header.sections {
            let end = offset.saturating_add(*size as usize);
            let Some(data) = bytes.get(offset..end) else {
                bail!("{shown} is truncated: section `{name}` needs {size} bytes");
            };
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

    /// Loads the `model` section into `model`'s weights.
    pub fn load_model<B: Backend, M: Module<B>>(
        &self,
        model: M,
        device: &B::Device,
        path: &Path,
    ) -> anyhow::Result<M> {
        let bytes = self
            .sections
            .get("model")
            .with_context(|| format!("{} has no model section", path.display()))?;
        let record = record_from_bytes::<B, M::Record>(bytes.clone(), device)
            .with_context(|| format!("{}: model weights do not fit this model", path.display()))?;
        Ok(model.load_record(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_clear_errors() {
        let path = Path::new("x.ckpt");
        let bytes = Checkpoint::encode(
            2,
            40,
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
        let mut wrong = bytes.clone();
        let at = wrong
            .windows(17)
            .position(|w| w == b"\"format_version\":")
            .unwrap();
        wrong[at + 17] = b'9';
        let e = Checkpoint::decode(&wrong, path).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
    }
}
