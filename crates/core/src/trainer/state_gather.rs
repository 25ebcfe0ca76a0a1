//! Checkpoints under a strategy whose ranks each keep part of the optimizer's state
//! (`ddp_sharded`): rank 0 writes the whole state, gathered from the other ranks at the moment
//! it saves, so a checkpoint is the same file `ddp` writes and resumes with any strategy and
//! any number of ranks.
//!
//! Only rank 0 saves, from inside a callback hook (or on a stop signal), while the other ranks
//! have no way to know it does. So every rank ends each such hook in [`StateGather::serve`]:
//! rank 0 says "done" there, after having said "send" once per save made in the hook
//! ([`StateGather::request`]); the other ranks answer each "send" with their part. That is one
//! all-reduce of one number per hook while nothing is saved. Ranks name parameters by their
//! place in visit order (burn's ids are random per process).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use anyhow::{Context, anyhow, ensure};
use burn::module::ParamId;
use safetensors::tensor::{SafeTensors, TensorView};

use super::checkpoint::{from_safetensors, to_safetensors};
use crate::collective::{Collective, ReduceOp};
use crate::optim::{self, OptimizerState};

/// The metadata key of a part's description.
const DESCRIPTION: &str = "optimizer_state";

/// Gathers the optimizer's state on rank 0 when it saves.
pub(crate) struct StateGather {
    collective: Rc<dyn Collective>,
    /// This process's ids of the trainable parameters, in visit order.
    order: Vec<ParamId>,
}

impl StateGather {
    /// A gatherer over `collective` for a model whose trainable parameters are `order`.
    pub(crate) fn new(collective: Rc<dyn Collective>, order: Vec<ParamId>) -> Self {
        Self { collective, order }
    }

    /// The whole state, given rank 0's own part: asks every other rank for its part.
    pub(crate) fn request(&self, own: OptimizerState) -> anyhow::Result<OptimizerState> {
        ensure!(
            self.collective.rank() == 0,
            "under a strategy that shards the optimizer state only rank 0 saves checkpoints (it gathers the state from the other ranks): save where state.is_global_zero"
        );
        let mut send = [1.0];
        self.collective.all_reduce_f64(&mut send, ReduceOp::Max)?;
        let parts = self.collective.all_gather(&[])?;
        let mut whole = own;
        for (rank, part) in parts.iter().enumerate().skip(1) {
            let state = decode(part).with_context(|| format!("rank {rank}'s optimizer state"))?;
            for (place, param) in state {
                let id = self.order.get(place as usize).ok_or_else(|| {
                    anyhow!("rank {rank} sent optimizer state for parameter #{place}, which this model lacks")
                })?;
                whole.insert(id.val(), param);
            }
        }
        Ok(whole)
    }

    /// Ends a hook in which rank 0 may have saved: rank 0 says it is done; every other rank
    /// sends its part (`own`) for each save rank 0 made.
    pub(crate) fn serve(
        &self,
        own: impl Fn() -> anyhow::Result<OptimizerState>,
    ) -> anyhow::Result<()> {
        let mut send = [0.0];
        if self.collective.rank() == 0 {
            return self.collective.all_reduce_f64(&mut send, ReduceOp::Max);
        }
        loop {
            send[0] = 0.0;
            self.collective.all_reduce_f64(&mut send, ReduceOp::Max)?;
            if send[0] == 0.0 {
                return Ok(());
            }
            let places: HashMap<u64, u64> = (self.order.iter().enumerate())
                .map(|(place, id)| (id.val(), place as u64))
                .collect();
            let mut part = OptimizerState::new();
            for (id, param) in own()? {
                let place = places.get(&id).ok_or_else(|| {
                    anyhow!("optimizer state for parameter {id}, which the model does not train")
                })?;
                part.insert(*place, param);
            }
            self.collective.all_gather(&encode(part)?)?;
        }
    }
}

/// A part of the state as a safetensors file in memory: its tensors, described in metadata.
fn encode(state: OptimizerState) -> anyhow::Result<Vec<u8>> {
    let (description, tensors) = optim::split(state)?;
    let mut views = Vec::with_capacity(tensors.len());
    for (name, data) in &tensors {
        let view = TensorView::new(
            to_safetensors(data.dtype)?,
            data.shape.to_vec(),
            data.as_bytes(),
        )
        .map_err(|e| anyhow!("optimizer state {name}: {e}"))?;
        views.push((name.clone(), view));
    }
    let metadata = HashMap::from([(DESCRIPTION.to_owned(), String::from_utf8(description)?)]);
    Ok(safetensors::serialize(views, Some(metadata))?)
}

/// What [`encode`] made.
fn decode(bytes: &[u8]) -> anyhow::Result<OptimizerState> {
    let (_, metadata) = SafeTensors::read_metadata(bytes)?;
    let description = metadata
        .metadata()
        .as_ref()
        .and_then(|m| m.get(DESCRIPTION))
        .ok_or_else(|| anyhow!("no description"))?
        .clone();
    let file = SafeTensors::deserialize(bytes)?;
    let mut tensors = BTreeMap::new();
    for (name, view) in file.tensors() {
        let dtype = from_safetensors(view.dtype())
            .ok_or_else(|| anyhow!("tensor {name} has dtype {:?}", view.dtype()))?;
        let data = burn::tensor::TensorData::from_bytes_vec(
            view.data().to_vec(),
            view.shape().to_vec(),
            dtype,
        );
        tensors.insert(name, data);
    }
    optim::join(description.as_bytes(), &tensors)
}

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;

    use super::*;
    use crate::optim::ParamState;

    #[test]
    fn a_part_survives_the_wire() {
        let adam = ParamState {
            kind: "adam".into(),
            rank: 2,
            counters: BTreeMap::from([("time".to_owned(), 7)]),
            tensors: BTreeMap::from([
                (
                    "moment_1".to_owned(),
                    TensorData::new(vec![1.5f32, -2.0], [1, 2]),
                ),
                (
                    "moment_2".to_owned(),
                    TensorData::new(vec![0.25f64, 4.0], [2, 1]),
                ),
            ]),
        };
        let state = OptimizerState::from([(3, adam)]);
        assert_eq!(decode(&encode(state.clone()).unwrap()).unwrap(), state);
    }
}
