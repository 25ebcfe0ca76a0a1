//! Optimizer state as checkpoints store it: per parameter id, tensors in their own dtypes.
//!
//! burn's optimizer records rebuild every state tensor in the device's default float type,
//! which a mixed precision sets to the low one (the f32 masters' Adam moments would come back
//! in bf16), and serialise floats as f32 (a 64-true run's moments would lose precision). For
//! burn's Adam, AdamW and SGD, ember reads the state tensors out of the optimizer itself and
//! builds them again with their dtype given explicitly.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, anyhow, bail};
use burn::module::{AutodiffModule, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::momentum::MomentumState;
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::optim::{
    AdamState, AdamWState, AdaptiveMomentumState, Optimizer, SgdState, SimpleOptimizer,
};
use burn::record::{DoublePrecisionSettings, Record};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};

/// One parameter's optimizer state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParamState {
    /// The optimizer's name for this kind of state (`adam`, `adamw`, `sgd`).
    pub kind: String,
    /// The parameter's tensor rank (burn keeps a state type per rank).
    pub rank: usize,
    /// Counters, e.g. Adam's `time`.
    pub counters: BTreeMap<String, u64>,
    /// Tensors, each in its own dtype, e.g. Adam's `moment_1` and `moment_2`.
    pub tensors: BTreeMap<String, TensorData>,
}

/// An optimizer's state: each parameter's, by burn's parameter id.
pub type OptimizerState = BTreeMap<u64, ParamState>;

/// An optimizer whose state the Trainer can save and restore exactly. burn's
/// `OptimizerAdaptor` implements it for every simple optimizer; `state` and `with_state` say
/// `None` for those whose state ember cannot read (anything but Adam, AdamW and SGD), and the
/// Trainer then falls back to burn's own record (exact under a true precision only). A custom
/// optimizer implements it with no methods for that fallback, or with both for exact resume.
pub trait ExactState<M: AutodiffModule<B>, B: AutodiffBackend>: Optimizer<M, B> {
    /// The state, tensors in their own dtypes; `dtypes` are the parameters' (SGD's velocity
    /// is read in f64 and stored in its parameter's dtype). `None`: not readable this way.
    fn state(&self, dtypes: &HashMap<ParamId, DType>) -> Option<anyhow::Result<OptimizerState>> {
        let _ = dtypes;
        None
    }

    /// The parameters this optimizer keeps state for, each with the bytes of its state, read
    /// without copying the state; `param_bytes` are the parameters' own sizes (SGD's velocity
    /// has its parameter's). `None`: not readable this way.
    fn state_bytes(&self, param_bytes: &HashMap<ParamId, u64>) -> Option<Vec<(ParamId, u64)>> {
        let _ = param_bytes;
        None
    }

    /// This optimizer with `state` loaded on `device`, every tensor in the dtype it was saved
    /// in. `None`: not loadable this way.
    fn with_state(self, state: OptimizerState, device: &B::Device) -> Option<anyhow::Result<Self>>
    where
        Self: Sized,
    {
        let _ = (state, device);
        None
    }
}

impl<O, M, B> ExactState<M, B> for OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend> + 'static,
    M: AutodiffModule<B> + 'static,
    B: AutodiffBackend + 'static,
{
    fn state(&self, dtypes: &HashMap<ParamId, DType>) -> Option<anyhow::Result<OptimizerState>> {
        let mut out = OptimizerState::new();
        for (id, record) in self.to_record() {
            let AdaptorRecord::V1(record) = record;
            let dtype = dtypes.get(&id).copied().unwrap_or(DType::F32);
            let state = match record {
                AdaptorRecordV1::Rank0(s) => read::<B::InnerBackend, 0>(Box::new(s), dtype),
                AdaptorRecordV1::Rank1(s) => read::<B::InnerBackend, 1>(Box::new(s), dtype),
                AdaptorRecordV1::Rank2(s) => read::<B::InnerBackend, 2>(Box::new(s), dtype),
                AdaptorRecordV1::Rank3(s) => read::<B::InnerBackend, 3>(Box::new(s), dtype),
                AdaptorRecordV1::Rank4(s) => read::<B::InnerBackend, 4>(Box::new(s), dtype),
                AdaptorRecordV1::Rank5(s) => read::<B::InnerBackend, 5>(Box::new(s), dtype),
                AdaptorRecordV1::Rank6(s) => read::<B::InnerBackend, 6>(Box::new(s), dtype),
                AdaptorRecordV1::Rank7(s) => read::<B::InnerBackend, 7>(Box::new(s), dtype),
                AdaptorRecordV1::Rank8(s) => read::<B::InnerBackend, 8>(Box::new(s), dtype),
            };
            match state {
                Some(Ok(state)) => out.insert(id.val(), state),
                Some(Err(e)) => return Some(Err(e)),
                None => return None,
            };
        }
        Some(Ok(out))
    }

    fn state_bytes(&self, param_bytes: &HashMap<ParamId, u64>) -> Option<Vec<(ParamId, u64)>> {
        let mut out = Vec::new();
        for (id, record) in self.to_record() {
            let AdaptorRecord::V1(record) = record;
            let param = param_bytes.get(&id).copied().unwrap_or(0);
            let bytes = match record {
                AdaptorRecordV1::Rank0(s) => size::<B::InnerBackend, 0>(Box::new(s), param),
                AdaptorRecordV1::Rank1(s) => size::<B::InnerBackend, 1>(Box::new(s), param),
                AdaptorRecordV1::Rank2(s) => size::<B::InnerBackend, 2>(Box::new(s), param),
                AdaptorRecordV1::Rank3(s) => size::<B::InnerBackend, 3>(Box::new(s), param),
                AdaptorRecordV1::Rank4(s) => size::<B::InnerBackend, 4>(Box::new(s), param),
                AdaptorRecordV1::Rank5(s) => size::<B::InnerBackend, 5>(Box::new(s), param),
                AdaptorRecordV1::Rank6(s) => size::<B::InnerBackend, 6>(Box::new(s), param),
                AdaptorRecordV1::Rank7(s) => size::<B::InnerBackend, 7>(Box::new(s), param),
                AdaptorRecordV1::Rank8(s) => size::<B::InnerBackend, 8>(Box::new(s), param),
            };
            out.push((id, bytes?));
        }
        Some(out)
    }

    fn with_state(self, state: OptimizerState, device: &B::Device) -> Option<anyhow::Result<Self>> {
        let mut records = Vec::with_capacity(state.len());
        for (id, param) in state {
            let record = match param.rank {
                0 => build::<O, B, 0>(param, device),
                1 => build::<O, B, 1>(param, device),
                2 => build::<O, B, 2>(param, device),
                3 => build::<O, B, 3>(param, device),
                4 => build::<O, B, 4>(param, device),
                5 => build::<O, B, 5>(param, device),
                6 => build::<O, B, 6>(param, device),
                7 => build::<O, B, 7>(param, device),
                8 => build::<O, B, 8>(param, device),
                rank => Some(Err(anyhow!(
                    "parameter {id}: rank {rank} (burn keeps 0 to 8)"
                ))),
            };
            match record {
                Some(Ok(record)) => records.push((ParamId::from(id), record)),
                Some(Err(e)) => return Some(Err(e.context(format!("parameter {id}")))),
                None => return None,
            };
        }
        Some(Ok(self.load_record(records.into_iter().collect())))
    }
}

/// The state of one parameter of rank `D`, if it is one ember reads.
fn read<B: Backend, const D: usize>(
    state: Box<dyn Any>,
    dtype: DType,
) -> Option<anyhow::Result<ParamState>> {
    let state = match state.downcast::<AdamState<B, D>>() {
        Ok(adam) => return Some(Ok(moments("adam", D, adam.momentum))),
        Err(other) => other,
    };
    let state = match state.downcast::<AdamWState<B, D>>() {
        Ok(adamw) => return Some(Ok(moments("adamw", D, adamw.momentum))),
        Err(other) => other,
    };
    let sgd = state.downcast::<SgdState<B, D>>().ok()?;
    let mut out = ParamState {
        kind: "sgd".into(),
        rank: D,
        ..ParamState::default()
    };
    if let Some(momentum) = sgd.momentum {
        match velocity(momentum, dtype) {
            Ok(v) => out.tensors.insert("velocity".into(), v),
            Err(e) => return Some(Err(e)),
        };
    }
    Some(Ok(out))
}

/// The bytes of one parameter's state of rank `D` (`param`: the parameter's own), if it is
/// one ember reads.
fn size<B: Backend, const D: usize>(state: Box<dyn Any>, param: u64) -> Option<u64> {
    let bytes = |t: &Tensor<B, D>| (t.shape().num_elements() * t.dtype().size()) as u64;
    let moments = |m: &AdaptiveMomentumState<B, D>| {
        bytes(&m.moment_1) + bytes(&m.moment_2) + m.max_moment_2.as_ref().map_or(0, bytes)
    };
    let state = match state.downcast::<AdamState<B, D>>() {
        Ok(adam) => return Some(moments(&adam.momentum)),
        Err(other) => other,
    };
    let state = match state.downcast::<AdamWState<B, D>>() {
        Ok(adamw) => return Some(moments(&adamw.momentum)),
        Err(other) => other,
    };
    let sgd = state.downcast::<SgdState<B, D>>().ok()?;
    Some(if sgd.momentum.is_some() { param } else { 0 })
}

/// Adam's and AdamW's state: the step count and the moments.
fn moments<B: Backend, const D: usize>(
    kind: &str,
    rank: usize,
    m: AdaptiveMomentumState<B, D>,
) -> ParamState {
    let mut tensors = BTreeMap::from([
        ("moment_1".to_owned(), m.moment_1.into_data()),
        ("moment_2".to_owned(), m.moment_2.into_data()),
    ]);
    if let Some(max) = m.max_moment_2 {
        tensors.insert("max_moment_2".to_owned(), max.into_data());
    }
    ParamState {
        kind: kind.to_owned(),
        rank,
        counters: BTreeMap::from([("time".to_owned(), m.time as u64)]),
        tensors,
    }
}

/// SGD's velocity (a private field): burn's record in f64 (exact for every float type), back
/// in the parameter's dtype.
fn velocity<B: Backend, const D: usize>(
    momentum: MomentumState<B, D>,
    dtype: DType,
) -> anyhow::Result<TensorData> {
    let item = momentum.into_item::<DoublePrecisionSettings>();
    let bytes = rmp_serde::to_vec_named(&item.velocity).context("reading SGD's velocity")?;
    let data: TensorData = rmp_serde::from_slice(&bytes).context("reading SGD's velocity")?;
    Ok(data.convert_dtype(dtype))
}

/// burn's record of one parameter's state, its tensors made in their saved dtypes; `None`
/// when `O` is not the optimizer the state is of.
fn build<O, B, const D: usize>(
    param: ParamState,
    device: &B::Device,
) -> Option<anyhow::Result<AdaptorRecord<O, B>>>
where
    O: SimpleOptimizer<B::InnerBackend> + 'static,
    B: AutodiffBackend,
{
    let state: Box<dyn Any> = match make::<B::InnerBackend, D>(param, device) {
        Ok(state) => state,
        Err(e) => return Some(Err(e)),
    };
    let state = state.downcast::<O::State<D>>().ok()?;
    Some(Ok(AdaptorRecord::from_state::<D>(*state)))
}

/// The burn state of `param`'s kind, boxed.
fn make<B: Backend, const D: usize>(
    param: ParamState,
    device: &B::Device,
) -> anyhow::Result<Box<dyn Any>> {
    let ParamState {
        kind,
        counters,
        mut tensors,
        ..
    } = param;
    let mut take = |name: &str| tensor::<B, D>(&mut tensors, name, &kind, device);
    Ok(match kind.as_str() {
        "adam" | "adamw" => {
            let time = counters.get("time").copied().unwrap_or(0) as usize;
            let mut m = AdaptiveMomentumState::new(time, take("moment_1")?, take("moment_2")?);
            m.max_moment_2 = take("max_moment_2").ok();
            if kind == "adam" {
                Box::new(AdamState { momentum: m })
            } else {
                Box::new(AdamWState { momentum: m })
            }
        }
        "sgd" => Box::new(SgdState {
            momentum: take("velocity").ok().map(MomentumState::new),
        }),
        other => bail!("optimizer state of kind `{other}`: this ember reads adam, adamw and sgd"),
    })
}

/// The state tensor `name` on `device`, in the dtype it was saved in.
fn tensor<B: Backend, const D: usize>(
    tensors: &mut BTreeMap<String, TensorData>,
    name: &str,
    kind: &str,
    device: &B::Device,
) -> anyhow::Result<Tensor<B, D>> {
    let data = tensors
        .remove(name)
        .with_context(|| format!("no `{name}` in the {kind} state"))?;
    let dtype = data.dtype;
    Ok(Tensor::from_data(data, (device, dtype)))
}

/// What the checkpoint's `optimizer_state` section says of one parameter; its tensors are
/// stored beside it as `<param id>.<name>`.
#[derive(serde::Serialize, serde::Deserialize)]
struct ParamEntry {
    kind: String,
    rank: usize,
    counters: BTreeMap<String, u64>,
    tensors: Vec<String>,
}

/// Tensors by name.
pub type NamedTensors = Vec<(String, TensorData)>;

/// The state as a JSON description and named tensors (`<param id>.<name>`).
pub fn split(state: OptimizerState) -> anyhow::Result<(Vec<u8>, NamedTensors)> {
    let mut entries = BTreeMap::new();
    let mut tensors = Vec::new();
    for (id, param) in state {
        let names = param.tensors.keys().cloned().collect();
        for (name, data) in param.tensors {
            tensors.push((format!("{id}.{name}"), data));
        }
        let entry = ParamEntry {
            kind: param.kind,
            rank: param.rank,
            counters: param.counters,
            tensors: names,
        };
        entries.insert(id.to_string(), entry);
    }
    Ok((serde_json::to_vec(&entries)?, tensors))
}

/// The state from [`split`]'s description and the tensors it names.
pub fn join(
    description: &[u8],
    tensors: &BTreeMap<String, TensorData>,
) -> anyhow::Result<OptimizerState> {
    let entries: BTreeMap<String, ParamEntry> =
        serde_json::from_slice(description).context("a corrupt optimizer_state section")?;
    let mut state = OptimizerState::new();
    for (id, entry) in entries {
        let mut param = ParamState {
            kind: entry.kind,
            rank: entry.rank,
            counters: entry.counters,
            tensors: BTreeMap::new(),
        };
        for name in entry.tensors {
            let key = format!("{id}.{name}");
            let data = tensors
                .get(&key)
                .with_context(|| format!("no optimizer state tensor `{key}`"))?;
            param.tensors.insert(name, data.clone());
        }
        let id: u64 = id
            .parse()
            .with_context(|| format!("optimizer state for parameter `{id}`"))?;
        state.insert(id, param);
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::momentum::MomentumConfig;
    use burn::optim::{AdamConfig, GradientsParams, SgdConfig};

    type B = burn_autodiff::Autodiff<burn_flex::Flex>;

    /// One step of `optimizer` on a linear layer; its state read, split, joined and loaded
    /// into a fresh optimizer reads back the same, dtypes and counters included.
    fn round_trip<O: ExactState<Linear<B>, B>>(mut optimizer: O, fresh: O, kind: &str) {
        let device = Default::default();
        let layer: Linear<B> = LinearConfig::new(3, 2).init(&device);
        let x = Tensor::<B, 2>::from_data([[1.0, 2.0, 3.0]], &device);
        let grads = GradientsParams::from_grads(layer.forward(x).sum().backward(), &layer);
        let layer = optimizer.step(0.1, layer, grads);
        let dtypes = HashMap::from([
            (layer.weight.id, DType::F32),
            (layer.bias.as_ref().unwrap().id, DType::F32),
        ]);
        let state = optimizer.state(&dtypes).unwrap().unwrap();
        assert_eq!(state.len(), 2);
        assert!(state.values().all(|p| p.kind == kind), "{state:?}");
        let (description, tensors) = split(state.clone()).unwrap();
        let joined = join(&description, &tensors.into_iter().collect()).unwrap();
        assert_eq!(joined, state);
        let loaded = fresh.with_state(joined, &device).unwrap().unwrap();
        assert_eq!(loaded.state(&dtypes).unwrap().unwrap(), state);
        let _ = layer.into_record();
    }

    #[test]
    fn adam_and_sgd_states_round_trip() {
        let adam = || AdamConfig::new().init::<B, Linear<B>>();
        round_trip(adam(), adam(), "adam");
        let sgd = || {
            SgdConfig::new()
                .with_momentum(Some(MomentumConfig::new()))
                .init::<B, Linear<B>>()
        };
        round_trip(sgd(), sgd(), "sgd");
    }

    #[test]
    fn a_state_of_another_optimizer_is_not_loaded() {
        let device = Default::default();
        let param = ParamState {
            kind: "adam".into(),
            rank: 1,
            counters: BTreeMap::from([("time".into(), 1)]),
            tensors: BTreeMap::from([
                ("moment_1".into(), TensorData::new(vec![0.0f32; 2], [2])),
                ("moment_2".into(), TensorData::new(vec![0.0f32; 2], [2])),
            ]),
        };
        let sgd = SgdConfig::new().init::<B, Linear<B>>();
        assert!(
            sgd.with_state(BTreeMap::from([(1, param)]), &device)
                .is_none()
        );
    }
}
