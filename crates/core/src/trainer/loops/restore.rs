//! How `fit` continues from a checkpoint: weights, every optimizer and scheduler, the
//! precision plugin's and the callbacks' states, the seed, and the position in the run.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use burn::module::ParamId;
use burn::optim::Optimizer;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::TensorData;
use burn::tensor::backend::AutodiffBackend;

use super::fit::{FitLoop, Position};
use super::optimization::{Optimization, SlotSections};
use super::schedule::{FitSchedule, batches_here};
use crate::callbacks::{self, Callback, CheckpointTensors};
use crate::optim::{self, ExactState};
use crate::plugins::dtype;
use crate::plugins::weights::ModelWeights;
use crate::trainer::Trainer;
use crate::trainer::checkpoint::{Checkpoint, Weight};
use crate::trainer::module::{SchedulerInterval, TrainingModule};
use crate::trainer::run::Run;
use crate::trainer::weights::param_ids;

impl<B, M> FitLoop<'_, B, M>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    /// Continues from `checkpoint`, read from `path`: weights, optimizers, schedulers, the
    /// precision plugin's and the callbacks' states, the seed, and the position in the run.
    pub(super) fn restore(
        trainer: &mut Trainer<B>,
        run: &mut Run,
        schedule: &FitSchedule,
        mut opt: Optimization<B, M>,
        mut checkpoint: Checkpoint,
        path: &Path,
    ) -> anyhow::Result<(Optimization<B, M>, Position)> {
        opt.model = checkpoint.load_model::<B, M>(opt.model, path)?;
        let ids = param_ids::<B, M>(&opt.model);
        let (edited, lacking) = restore_callbacks(&mut run.callbacks, &mut checkpoint, &ids, path)?;
        if edited {
            opt.model = checkpoint.load_model::<B, M>(opt.model, path)?;
        }
        if !lacking.is_empty() && trainer.is_global_zero() {
            eprintln!(
                "warning: {} holds the state of callbacks this run does not have: {}; resuming without them drops it (add them to --trainer.callbacks to keep it)",
                path.display(),
                lacking.join(", ")
            );
        }
        let saved = (1..)
            .take_while(|&i| {
                checkpoint
                    .sections
                    .contains_key(&SlotSections::of(i).scheduler)
            })
            .count()
            + 1;
        anyhow::ensure!(
            saved == opt.slots.len(),
            "{} holds the state of {saved} optimizer(s), but configure_optimizers returned {}",
            path.display(),
            opt.slots.len()
        );
        let slots = std::mem::take(&mut opt.slots);
        for (index, mut slot) in slots.into_iter().enumerate() {
            let names = SlotSections::of(index);
            slot.optimizer = match checkpoint.sections.get(&names.state) {
                Some(description) => Self::restore_state(
                    trainer,
                    &mut opt,
                    slot.optimizer,
                    &checkpoint,
                    path,
                    (description, &names.prefix),
                )?,
                None => {
                    Self::restore_record(trainer, slot.optimizer, &checkpoint, &names.record, path)?
                }
            };
            let scheduler = checkpoint.record::<B, _>(&names.scheduler, &trainer.device, path)?;
            slot.scheduler = slot.scheduler.load_record::<B>(scheduler);
            opt.slots.push(slot);
        }
        let precision = &mut trainer.strategy.parts_mut().precision;
        let key = precision.state_key();
        if let Some(bytes) = checkpoint.sections.get(&key) {
            let corrupt = || format!("{}: corrupt {key} section", path.display());
            let state: serde_json::Value = serde_json::from_slice(bytes).with_context(corrupt)?;
            precision.load_state(&state).with_context(corrupt)?;
        }
        let h = &checkpoint.header;
        if trainer.options.seed.is_none() {
            // The epochs' shuffles follow from the seed: continue with the run's own.
            trainer.seed = h.seed;
            run.seed = h.seed;
            B::seed(&trainer.device, h.seed);
        }
        run.state.global_step = h.global_step;
        run.state.learning_rate = h.learning_rate;
        if opt.interval == SchedulerInterval::Epoch {
            // A fit resumed within an epoch keeps the rates the schedulers gave that epoch.
            let rates = match checkpoint.sections.get(SlotSections::RATES) {
                Some(bytes) => serde_json::from_slice(bytes).with_context(|| {
                    format!("{}: corrupt learning_rates section", path.display())
                })?,
                None => vec![h.learning_rate],
            };
            for (slot, rate) in opt.slots.iter_mut().zip(rates) {
                slot.lr = rate;
            }
        }
        let world = trainer.collective().world_size() as u64;
        let done = if h.epoch_done {
            None
        } else {
            Some(batches_here(h.batches_done, h.world_size, world))
        };
        let (epoch, skip) = schedule.resume_at(h.epoch, done);
        tracing::info!(
            target: "ember",
            "resuming from {} at epoch {epoch}, batch {skip}, step {}",
            path.display(),
            h.global_step
        );
        Ok((opt, Position { epoch, skip }))
    }

    /// An optimizer from the state ember wrote (`description` and the tensors named with
    /// `prefix`), keeping only the parameters this rank owns where the strategy shards it.
    fn restore_state(
        trainer: &mut Trainer<B>,
        opt: &mut Optimization<B, M>,
        optimizer: M::Optimizer,
        checkpoint: &Checkpoint,
        path: &Path,
        (description, prefix): (&[u8], &str),
    ) -> anyhow::Result<M::Optimizer> {
        let tensors: Cow<'_, BTreeMap<String, TensorData>> = match prefix {
            "" => Cow::Borrowed(&checkpoint.optimizer_state),
            prefix => Cow::Owned(
                (checkpoint.optimizer_state.iter())
                    .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_owned(), v.clone())))
                    .collect(),
            ),
        };
        let mut state = optim::join(description, &tensors)
            .with_context(|| format!("{}: the optimizer's state", path.display()))?;
        let weights = ModelWeights::<B, M>::new(&mut opt.model);
        let sharding = trainer.strategy.optimizer_sharding();
        if let Some(owned) = sharding.and_then(|s| s.owned(&weights)) {
            state.retain(|id, _| owned.contains(&ParamId::from(*id)));
        }
        let kind = state.values().next().map(|p| p.kind.clone());
        optimizer
            .with_state(state, &trainer.device)
            .with_context(|| {
                format!(
                    "{} holds the state of {} optimizer, which this model's optimizer does not read",
                    path.display(),
                    kind.as_deref().unwrap_or("an")
                )
            })?
            .with_context(|| format!("{}: the optimizer's state", path.display()))
    }

    /// The optimizer from burn's record (a format-2 checkpoint, or an optimizer whose state
    /// ember does not read), which burn rebuilds in the device's default float type: refused
    /// under a mixed precision, whose f32 masters' moments would come back in the low type.
    fn restore_record(
        trainer: &Trainer<B>,
        optimizer: M::Optimizer,
        checkpoint: &Checkpoint,
        section: &str,
        path: &Path,
    ) -> anyhow::Result<M::Optimizer> {
        if trainer.precision().casts_for_compute() {
            let low = dtype::compute_dtype(trainer.precision().precision());
            anyhow::bail!(
                "cannot resume fit from {} under a mixed precision: its optimizer state is a burn record, which burn restores in the device's float type ({low:?}), not in the f32 of the master weights (ember stores the state of Adam, AdamW and SGD itself; other optimizers resume under a true precision only)",
                path.display()
            );
        }
        let record = checkpoint.record::<B, _>(section, &trainer.device, path)?;
        Ok(optimizer.load_record(record))
    }
}

/// Gives every callback its state and tensors from `checkpoint`, and lets it edit the weights
/// ([`Callback::on_load_checkpoint`]), each under the id its parameter has in the loaded model
/// (`ids`). Returns whether a callback replaced a weight (then they are loaded again), and the
/// state keys of the checkpoint's callbacks that none of `callbacks` took.
fn restore_callbacks(
    callbacks: &mut [Box<dyn Callback>],
    checkpoint: &mut Checkpoint,
    ids: &BTreeMap<String, ParamId>,
    path: &Path,
) -> anyhow::Result<(bool, Vec<String>)> {
    let mut states: callbacks::CallbackStates = match checkpoint.sections.get("callbacks") {
        Some(bytes) => serde_json::from_slice(bytes)
            .with_context(|| format!("{}: corrupt callbacks section", path.display()))?,
        None => Default::default(),
    };
    let mut weights: Vec<Weight> = std::mem::take(&mut checkpoint.weights)
        .into_iter()
        .map(|(name, data)| {
            let id = ids.get(&name).copied().unwrap_or_else(ParamId::new);
            (name, id, data)
        })
        .collect();
    // Where each weight's bytes are: a callback that replaces a weight moves other bytes in.
    let buffers = |weights: &[Weight]| -> Vec<*const u8> {
        weights
            .iter()
            .map(|(_, _, d)| d.as_bytes().as_ptr())
            .collect()
    };
    let before = buffers(&weights);
    for c in callbacks.iter_mut() {
        let key = c.state_key();
        let what = format!("restoring callback {} from {}", c.name(), path.display());
        let restoring = || what.clone();
        if let Some(state) = states.remove(&key) {
            c.load_state(&state).with_context(restoring)?;
        }
        let mut own = checkpoint.callback_tensors.remove(&key).unwrap_or_default();
        let mut tensors = CheckpointTensors {
            weights: &mut weights,
            own: &mut own,
        };
        c.on_load_checkpoint(&mut tensors).with_context(restoring)?;
    }
    let edited = buffers(&weights) != before;
    checkpoint.weights = weights
        .into_iter()
        .map(|(name, _, data)| (name, data))
        .collect();
    let mut lacking: Vec<String> = states.into_keys().collect();
    lacking.extend(checkpoint.callback_tensors.keys().cloned());
    lacking.sort();
    lacking.dedup();
    Ok((edited, lacking))
}
