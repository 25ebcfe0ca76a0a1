//! A checkpoint's header: what it says about itself (format version, progress, metrics, a
//! CRC-32C of every tensor), where the safetensors metadata keeps it, and how it is read and
//! checked, also without reading the tensors.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use anyhow::{Context, ensure};
use serde::{Deserialize, Serialize};

/// The format this build writes; it reads this one and version 2 (no optimizer state tensors).
pub const FORMAT_VERSION: u32 = 3;
/// Metadata key of the header JSON.
pub const HEADER_KEY: &str = "ember.header";
/// Metadata key of the header's CRC-32C (decimal).
pub const HEADER_CRC_KEY: &str = "ember.header_crc32c";

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
    /// Training batches completed in `epoch` when it was written (each process's).
    pub batches_done: u64,
    /// Whether those were all of the epoch's training batches (`false` in files written before
    /// this was recorded: `batches_done` then decides).
    #[serde(default)]
    pub epoch_done: bool,
    /// Processes in the run that wrote it (0 in files written before this was recorded: taken
    /// as the resuming run's).
    #[serde(default)]
    pub world_size: u64,
    /// The learning rate of the latest optimizer step.
    pub learning_rate: f64,
    /// The run's seed (the epochs' shuffles follow from it).
    pub seed: u64,
    /// The metrics known when it was written.
    pub metrics: BTreeMap<String, f64>,
    /// Sections other than the weights: names, byte lengths and CRC-32C checksums.
    pub sections: Vec<(String, u64, u32)>,
    /// Weight tensors: module paths, the CRC-32C of their bytes and burn's parameter ids
    /// (the optimizer's state is keyed by them).
    pub weights: Vec<(String, u32, u64)>,
    /// The optimizer's state tensors (without the `__optimizer__.` prefix the file gives them) and their CRC-32C.
    #[serde(default)]
    pub optimizer_state: Vec<(String, u32)>,
    /// The callbacks' tensors: the callback's state key, the tensor's name and its CRC-32C.
    #[serde(default)]
    pub callback_tensors: Vec<(String, String, u32)>,
}

/// CRC-32C with slice-by-16 tables (built at compile time): a checkpoint's megabytes are
/// checksummed on every save and load.
const CASTAGNOLI: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

pub(super) fn crc32(bytes: &[u8]) -> u32 {
    CASTAGNOLI.checksum(bytes)
}

/// The ember header in a safetensors file's metadata, checked: present, its checksum right,
/// its format version this build's (what it says is checked by `integrity`).
pub(super) fn parse_header(
    metadata: Option<&HashMap<String, String>>,
    path: &Path,
) -> anyhow::Result<CheckpointHeader> {
    let shown = path.display();
    let json = metadata.and_then(|m| m.get(HEADER_KEY)).with_context(|| {
        format!(
            "{shown} is not an ember checkpoint (a safetensors file without the {HEADER_KEY} metadata)"
        )
    })?;
    ensure!(
        metadata
            .and_then(|m| m.get(HEADER_CRC_KEY))
            .and_then(|c| c.parse::<u32>().ok())
            == Some(crc32(json.as_bytes())),
        "{shown} has a corrupt header (checksum mismatch: damaged or flipped bytes)"
    );
    let header: CheckpointHeader =
        serde_json::from_str(json).with_context(|| format!("{shown} has a corrupt header"))?;
    ensure!(
        (2..=FORMAT_VERSION).contains(&header.format_version),
        "{shown} has checkpoint format version {}, this ember reads versions 2 to {FORMAT_VERSION}",
        header.format_version
    );
    Ok(header)
}

/// The header of the checkpoint at `path` from the first bytes of the file, as
/// [`parse_header`] checks it.
pub(super) fn read_parsed_header(path: &Path) -> anyhow::Result<CheckpointHeader> {
    let shown = path.display();
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {shown}"))?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .with_context(|| format!("{shown} is truncated"))?;
    let len = usize::try_from(u64::from_le_bytes(len))?;
    ensure!(
        len <= MAX_HEADER_BYTES,
        "{shown} is not an ember checkpoint (a {len}-byte header)"
    );
    let mut json = vec![0; len];
    file.read_exact(&mut json)
        .with_context(|| format!("{shown} is truncated"))?;
    let fields: serde_json::Value = serde_json::from_slice(&json)
        .with_context(|| format!("{shown} is not an ember checkpoint"))?;
    let metadata: Option<HashMap<String, String>> =
        serde_json::from_value(fields["__metadata__"].clone()).ok();
    parse_header(metadata.as_ref(), path)
}

/// The largest safetensors header [`read_parsed_header`] reads (safetensors' own limit).
const MAX_HEADER_BYTES: usize = 100_000_000;
