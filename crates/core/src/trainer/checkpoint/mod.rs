//! The checkpoint file: a safetensors file that PyTorch, NumPy or any safetensors reader opens.
//!
//! Tensors: the model's weights under their module paths (`mlp.hidden.0.weight`, ...) in the
//! dtypes they were trained in; the optimizer's state tensors as `__optimizer__.<param id>.
//! <name>` (Adam's `moment_1` ...), each in its own dtype, described by the `optimizer_state`
//! section; tensors callbacks keep (weight averaging's) as `__callbacks__.<state key>.<name>`;
//! and each other section (`scheduler`, `grad_scaler`, `callbacks`: burn records as
//! named MessagePack, or JSON; `optimizer`, burn's record, for optimizers whose state ember
//! cannot read) as a `U8` tensor named `__ember__.<section>`. Metadata: `ember.header` ([`CheckpointHeader`] as JSON: format
//! version, ember version, progress, metrics, and a CRC-32C of every tensor) and
//! `ember.header_crc32c`. Reading checks the safetensors structure (a truncated file fails
//! there), the header's checksum, the format version and every tensor's checksum, and names the
//! file and what is wrong; loading weights checks their names, shapes and dtypes against the
//! model. See `docs/checkpoints.md`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, anyhow, ensure};
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, TensorData};
use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors, TensorView};

use self::header::{crc32, parse_header, read_parsed_header};
use self::integrity::{check_all_listed, check_header};
use super::weights::load_into;
pub use super::weights::{Weight, weights_of};
pub use crate::callbacks::CallbackTensors;
pub use header::{CheckpointHeader, FORMAT_VERSION, HEADER_CRC_KEY, HEADER_KEY};

mod header;
mod integrity;

/// Name prefix of the tensors that hold sections other than the weights.
pub const SECTION_PREFIX: &str = "__ember__.";
/// Name prefix of the optimizer's state tensors.
pub const STATE_PREFIX: &str = "__optimizer__.";
/// Name prefix of the tensors callbacks keep (`__callbacks__.<state key>.<name>`).
pub const CALLBACK_PREFIX: &str = "__callbacks__.";

/// Whether a weight named `name` would take a name ember keeps for its own tensors.
fn is_reserved(name: &str) -> bool {
    [SECTION_PREFIX, STATE_PREFIX, CALLBACK_PREFIX]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The file's tensor holding section `name`.
fn section_tensor(name: &str) -> String {
    format!("{SECTION_PREFIX}{name}")
}

/// The file's tensor holding the optimizer state tensor `name`.
fn state_tensor(name: &str) -> String {
    format!("{STATE_PREFIX}{name}")
}

/// The file's tensor holding tensor `name` of the callback whose state key is `key`.
fn callback_tensor(key: &str, name: &str) -> String {
    format!("{CALLBACK_PREFIX}{key}.{name}")
}

/// The tensors of a checkpoint besides the weights.
#[derive(Debug, Clone, Default)]
pub struct ExtraTensors {
    /// The optimizer's state tensors (names without the `__optimizer__.` prefix).
    pub optimizer_state: Vec<(String, TensorData)>,
    /// The callbacks' tensors by state key.
    pub callbacks: BTreeMap<String, CallbackTensors>,
}

/// Where training stood when a checkpoint was written.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    /// Epoch (0-based).
    pub epoch: u64,
    /// Optimizer steps taken.
    pub global_step: u64,
    /// Training batches completed in `epoch` (each process's).
    pub batches_done: u64,
    /// Whether those were all of the epoch's training batches.
    pub epoch_done: bool,
    /// Processes in the run that wrote it.
    pub world_size: u64,
    /// The learning rate of the latest optimizer step.
    pub learning_rate: f64,
    /// The run's seed.
    pub seed: u64,
}

/// A decoded checkpoint: header, weights and the other sections.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The header.
    pub header: CheckpointHeader,
    /// The model's weights by module path.
    pub weights: BTreeMap<String, TensorData>,
    /// The optimizer's state tensors by name (without the `__optimizer__.` prefix).
    pub optimizer_state: BTreeMap<String, TensorData>,
    /// The callbacks' tensors by state key, then name.
    pub callback_tensors: BTreeMap<String, CallbackTensors>,
    /// The other sections by name.
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

/// The dtypes a checkpoint holds: burn's and safetensors' names for each.
const DTYPES: [(DType, Dtype); 12] = [
    (DType::F64, Dtype::F64),
    (DType::F32, Dtype::F32),
    (DType::F16, Dtype::F16),
    (DType::BF16, Dtype::BF16),
    (DType::I64, Dtype::I64),
    (DType::I32, Dtype::I32),
    (DType::I16, Dtype::I16),
    (DType::I8, Dtype::I8),
    (DType::U64, Dtype::U64),
    (DType::U32, Dtype::U32),
    (DType::U16, Dtype::U16),
    (DType::U8, Dtype::U8),
];

/// The safetensors name of a burn dtype.
pub(crate) fn to_safetensors(dtype: DType) -> anyhow::Result<Dtype> {
    DTYPES
        .iter()
        .find(|(burn, _)| *burn == dtype)
        .map(|&(_, st)| st)
        .with_context(|| format!("a checkpoint cannot hold {dtype:?} tensors"))
}

/// The burn dtype of a safetensors one.
pub(crate) fn from_safetensors(dtype: Dtype) -> Option<DType> {
    DTYPES
        .iter()
        .find(|(_, st)| *st == dtype)
        .map(|&(burn, _)| burn)
}

/// Reads only the header of the checkpoint at `path` (the first bytes of the file), to choose
/// among checkpoints without reading their tensors; refused as [`Checkpoint::decode`] refuses
/// it.
pub fn read_header(path: &Path) -> anyhow::Result<CheckpointHeader> {
    let header = read_parsed_header(path)?;
    check_header(&header, &path.display())?;
    Ok(header)
}

impl Checkpoint {
    /// Encodes progress, metrics, weights and the other sections into file bytes.
    pub fn encode(
        progress: Progress,
        metrics: BTreeMap<String, f64>,
        weights: Vec<Weight>,
        sections: Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<Vec<u8>> {
        let extra = ExtraTensors::default();
        Self::encode_with_state(progress, metrics, weights, extra, sections)
    }

    /// [`encode`](Self::encode), with the optimizer's state and the callbacks' tensors.
    pub(crate) fn encode_with_state(
        progress: Progress,
        metrics: BTreeMap<String, f64>,
        weights: Vec<Weight>,
        extra: ExtraTensors,
        sections: Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<Vec<u8>> {
        let ExtraTensors {
            optimizer_state,
            callbacks,
        } = extra;
        let header = CheckpointHeader {
            format_version: FORMAT_VERSION,
            ember_version: env!("CARGO_PKG_VERSION").to_owned(),
            epoch: progress.epoch,
            global_step: progress.global_step,
            batches_done: progress.batches_done,
            epoch_done: progress.epoch_done,
            world_size: progress.world_size,
            learning_rate: progress.learning_rate,
            seed: progress.seed,
            metrics,
            sections: sections
                .iter()
                .map(|(n, b)| (n.clone(), b.len() as u64, crc32(b)))
                .collect(),
            weights: weights
                .iter()
                .map(|(n, id, d)| (n.clone(), crc32(d.as_bytes()), id.val()))
                .collect(),
            optimizer_state: optimizer_state
                .iter()
                .map(|(n, d)| (n.clone(), crc32(d.as_bytes())))
                .collect(),
            callback_tensors: callbacks
                .iter()
                .flat_map(|(key, tensors)| {
                    (tensors.iter()).map(|(n, d)| (key.clone(), n.clone(), crc32(d.as_bytes())))
                })
                .collect(),
        };
        let weights: Vec<(String, TensorData)> =
            weights.into_iter().map(|(n, _, d)| (n, d)).collect();
        let callback_tensors: Vec<(String, TensorData)> = callbacks
            .into_iter()
            .flat_map(|(key, tensors)| {
                (tensors.into_iter()).map(move |(name, data)| (format!("{key}.{name}"), data))
            })
            .collect();
        let prefixed = [
            (STATE_PREFIX, optimizer_state.as_slice()),
            (CALLBACK_PREFIX, callback_tensors.as_slice()),
        ];
        Self::encode_header(&header, &weights, prefixed, &sections)
    }

    fn encode_header(
        header: &CheckpointHeader,
        weights: &[(String, TensorData)],
        prefixed: [(&str, &[(String, TensorData)]); 2],
        sections: &[(String, Vec<u8>)],
    ) -> anyhow::Result<Vec<u8>> {
        let json = serde_json::to_string(header)?;
        let metadata = HashMap::from([
            (
                HEADER_CRC_KEY.to_owned(),
                crc32(json.as_bytes()).to_string(),
            ),
            (HEADER_KEY.to_owned(), json),
        ]);
        let mut views = Vec::with_capacity(weights.len() + sections.len());
        for (name, _) in weights {
            ensure!(
                !is_reserved(name),
                "parameter name {name} uses a reserved prefix ({SECTION_PREFIX}, {STATE_PREFIX} or {CALLBACK_PREFIX})"
            );
        }
        let others = prefixed.into_iter().flat_map(|(prefix, tensors)| {
            (tensors.iter()).map(move |(name, data)| (format!("{prefix}{name}"), data))
        });
        for (name, data) in weights.iter().map(|(n, d)| (n.clone(), d)).chain(others) {
            let view = TensorView::new(
                to_safetensors(data.dtype)?,
                data.shape.to_vec(),
                data.as_bytes(),
            )
            .map_err(|e| anyhow!("tensor {name}: {e}"))?;
            views.push((name, view));
        }
        for (name, bytes) in sections {
            let view = TensorView::new(Dtype::U8, vec![bytes.len()], bytes)
                .map_err(|e| anyhow!("section {name}: {e}"))?;
            views.push((section_tensor(name), view));
        }
        safetensors::serialize(views, Some(metadata)).context("writing the safetensors file")
    }

    /// Decodes file bytes; `path` is only for messages. Checks the safetensors structure, the
    /// header's and every tensor's CRC-32C, the format version, and the header as the file's
    /// record: every tensor listed exactly once, counters a run can reach.
    pub fn decode(bytes: &[u8], path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        let structure = |e: SafeTensorError| match e {
            SafeTensorError::InvalidHeaderLength | SafeTensorError::MetadataIncompleteBuffer => {
                anyhow!("{shown} is truncated or has bytes missing ({e})")
            }
            SafeTensorError::HeaderTooSmall if bytes.len() < 8 => {
                anyhow!("{shown} is truncated: it has only {} bytes", bytes.len())
            }
            e => {
                anyhow!("{shown} is not an ember checkpoint (not a readable safetensors file: {e})")
            }
        };
        let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(structure)?;
        let header = parse_header(metadata.metadata().as_ref(), path)?;
        let listed = check_header(&header, &shown)?;
        let tensors = SafeTensors::deserialize(bytes).map_err(structure)?;
        check_all_listed(&listed, tensors.names(), &shown)?;
        let mut sections = BTreeMap::new();
        for (name, size, crc) in &header.sections {
            let view = tensors.tensor(&section_tensor(name)).map_err(|_| {
                anyhow!("{shown} has no `{name}` section although its header lists one")
            })?;
            ensure!(
                view.data().len() as u64 == *size && crc32(view.data()) == *crc,
                "{shown}: section `{name}` fails its checksum (damaged or flipped bytes)"
            );
            sections.insert(name.clone(), view.data().to_vec());
        }
        let read = |name: &str, crc: u32, what: &str| -> anyhow::Result<TensorData> {
            let view = tensors.tensor(name).map_err(|_| {
                anyhow!("{shown} has no {what} `{name}` although its header lists one")
            })?;
            ensure!(
                crc32(view.data()) == crc,
                "{shown}: {what} `{name}` fails its checksum (damaged or flipped bytes)"
            );
            let dtype = from_safetensors(view.dtype()).with_context(|| {
                format!("{shown}: {what} `{name}` has dtype {:?}", view.dtype())
            })?;
            Ok(TensorData::from_bytes_vec(
                view.data().to_vec(),
                view.shape().to_vec(),
                dtype,
            ))
        };
        let mut weights = BTreeMap::new();
        for (name, crc, _) in &header.weights {
            weights.insert(name.clone(), read(name, *crc, "weight")?);
        }
        let mut optimizer_state = BTreeMap::new();
        for (name, crc) in &header.optimizer_state {
            let data = read(&state_tensor(name), *crc, "optimizer state")?;
            optimizer_state.insert(name.clone(), data);
        }
        let mut callback_tensors = BTreeMap::<String, CallbackTensors>::new();
        for (key, name, crc) in &header.callback_tensors {
            let data = read(&callback_tensor(key, name), *crc, "callback tensor")?;
            (callback_tensors.entry(key.clone()).or_default()).insert(name.clone(), data);
        }
        Ok(Self {
            header,
            weights,
            optimizer_state,
            callback_tensors,
            sections,
        })
    }

    /// The loss scaler's state, when the run had one (16-mixed).
    pub fn grad_scaler(
        &self,
        path: &Path,
    ) -> anyhow::Result<Option<crate::plugins::scaler::GradScaler>> {
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

    /// Loads the weights (and parameter ids) into `model`: every float parameter must be there
    /// with its shape, and every weight must find a parameter. A float weight stored in another
    /// float type than the model's parameter (f32 master weights of a mixed-precision run,
    /// evaluated in bf16) is converted to the parameter's type.
    pub fn load_model<B: Backend, M: Module<B>>(&self, model: M, path: &Path) -> anyhow::Result<M> {
        let ids = self
            .header
            .weights
            .iter()
            .map(|(name, _, id)| (name.as_str(), *id))
            .collect();
        let (model, errors) = load_into(model, &self.weights, ids);
        ensure!(
            errors.is_empty(),
            "{}: its weights do not fit the model: {}",
            path.display(),
            errors.join("; ")
        );
        Ok(model)
    }
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
