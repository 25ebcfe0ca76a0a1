//! Weight averaging: [`AveragedWeights`], an average of the model's weights kept beside it, and
//! EMAWeightAveraging, which validates, saves and ends `fit` with an exponential moving average
//! of the weights (Lightning's `WeightAveraging` and `EMAWeightAveraging`).

use std::collections::HashMap;

use anyhow::{Context, ensure};
use burn::module::ParamId;
use burn::tensor::{DType, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Callback, CallbackContext, CheckpointTensors};
use crate::error::{FlagError, PlanResult};
use crate::plugins::weights::Weights;

/// How an average takes in the current weights (after the first update, which copies them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Rule {
    /// `average × decay + current × (1 − decay)` (torch's `get_ema_avg_fn`).
    Ema { decay: f64 },
    /// The equally weighted mean of every update (torch's default `avg_fn`, SWA's).
    Mean,
}

/// An average of the model's float tensors (parameters and buffers such as batch-norm
/// statistics) by parameter id, each in its tensor's dtype, as torch's `AveragedModel` keeps
/// it with `use_buffers=True`.
#[derive(Debug, Clone, Default)]
pub struct AveragedWeights {
    average: HashMap<ParamId, TensorData>,
    /// Updates taken in (torch's `n_averaged`).
    n_averaged: u64,
    /// The weights training continues from, while the model holds the average.
    stashed: Option<Vec<(ParamId, TensorData)>>,
}

impl AveragedWeights {
    /// Updates taken in so far.
    pub fn n_averaged(&self) -> u64 {
        self.n_averaged
    }

    /// Starts the average at the model's weights, unless a checkpoint restored it.
    pub(super) fn start(&mut self, weights: &dyn Weights) {
        if self.average.is_empty() {
            self.average = weights.to_host().into_iter().collect();
        }
    }

    /// Takes the model's weights into the average by `rule` (the first update copies them).
    pub(super) fn update(&mut self, weights: &dyn Weights, rule: Rule) -> anyhow::Result<()> {
        let n = self.n_averaged;
        for (id, current) in weights.to_host() {
            let average = match self.average.get(&id) {
                Some(average) if n > 0 => combine(average, &current, rule, n)
                    .with_context(|| format!("averaging parameter {id}"))?,
                _ => current,
            };
            self.average.insert(id, average);
        }
        self.n_averaged += 1;
        Ok(())
    }

    /// Puts the average into the model, keeping the model's own weights to
    /// [`swap_out`](Self::swap_out) later.
    pub(super) fn swap_in(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        if self.stashed.is_none() && !self.average.is_empty() {
            self.stashed = Some(weights.to_host());
            weights.load_host(self.averaged())?;
        }
        Ok(())
    }

    /// Gives the model back the weights [`swap_in`](Self::swap_in) kept.
    pub(super) fn swap_out(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        match self.stashed.take() {
            Some(stashed) => weights.load_host(stashed),
            None => Ok(()),
        }
    }

    /// Loads the average into the model for good (the end of `fit`).
    pub(super) fn copy_in(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.stashed = None;
        weights.load_host(self.averaged())
    }

    fn averaged(&self) -> Vec<(ParamId, TensorData)> {
        (self.average.iter())
            .map(|(id, data)| (*id, data.clone()))
            .collect()
    }

    /// A checkpoint whose weights are the average, with the weights training continues from
    /// as own tensors named by module path (Lightning's `state_dict` and
    /// `current_model_state`).
    pub(super) fn save_as_weights(&self, checkpoint: &mut CheckpointTensors<'_>) {
        let stashed: Option<HashMap<ParamId, &TensorData>> =
            (self.stashed.as_ref()).map(|s| s.iter().map(|(id, data)| (*id, data)).collect());
        for (path, id, data) in checkpoint.weights.iter_mut() {
            let current = match &stashed {
                // The model holds the average now (a save during validation).
                Some(stashed) => stashed.get(id).map(|d| (*d).clone()),
                None => {
                    (self.average.get(id)).map(|average| std::mem::replace(data, average.clone()))
                }
            };
            if let Some(current) = current {
                checkpoint.own.insert(path.clone(), current);
            }
        }
    }

    /// The inverse of [`save_as_weights`](Self::save_as_weights): the checkpoint's weights
    /// become the average and its own tensors the weights training continues from. A
    /// checkpoint written without averaging starts the average at its weights.
    pub(super) fn load_from_weights(&mut self, checkpoint: &mut CheckpointTensors<'_>) {
        self.stashed = None;
        self.average.clear();
        for (path, id, data) in checkpoint.weights.iter_mut() {
            if !data.dtype.is_float() {
                continue;
            }
            let average = match checkpoint.own.remove(path.as_str()) {
                Some(current) => std::mem::replace(data, current),
                None => data.clone(),
            };
            self.average.insert(*id, average);
        }
    }

    /// The average as own tensors named by module path, the weights left as they are.
    pub(super) fn save_beside(&self, checkpoint: &mut CheckpointTensors<'_>) {
        for (path, id, _) in checkpoint.weights.iter() {
            if let Some(average) = self.average.get(id) {
                checkpoint.own.insert(path.clone(), average.clone());
            }
        }
    }

    /// The inverse of [`save_beside`](Self::save_beside).
    pub(super) fn load_beside(&mut self, checkpoint: &mut CheckpointTensors<'_>) {
        self.stashed = None;
        self.average.clear();
        for (path, id, _) in checkpoint.weights.iter() {
            if let Some(average) = checkpoint.own.remove(path.as_str()) {
                self.average.insert(*id, average);
            }
        }
    }
}

/// `rule` applied to one tensor, in its dtype: f64 tensors in f64, the others in f32 (rounded
/// back to their type).
fn combine(
    average: &TensorData,
    current: &TensorData,
    rule: Rule,
    n: u64,
) -> anyhow::Result<TensorData> {
    ensure!(
        average.shape == current.shape && average.dtype == current.dtype,
        "its shape or dtype changed during fit"
    );
    let shape = current.shape.clone();
    let dtype = current.dtype;
    let data = match dtype {
        DType::F64 => {
            let (a, c) = (average.to_vec::<f64>()?, current.to_vec::<f64>()?);
            let out: Vec<f64> = match rule {
                Rule::Ema { decay } => (a.iter().zip(&c))
                    .map(|(a, c)| a * decay + c * (1.0 - decay))
                    .collect(),
                Rule::Mean => (a.iter().zip(&c))
                    .map(|(a, c)| a + (c - a) / (n as f64 + 1.0))
                    .collect(),
            };
            TensorData::new(out, shape)
        }
        _ => {
            let as_f32 = |d: &TensorData| d.clone().convert_dtype(DType::F32).to_vec::<f32>();
            let (a, c) = (as_f32(average)?, as_f32(current)?);
            let out: Vec<f32> = match rule {
                Rule::Ema { decay } => {
                    let (keep, take) = (decay as f32, (1.0 - decay) as f32);
                    (a.iter().zip(&c))
                        .map(|(a, c)| a * keep + c * take)
                        .collect()
                }
                Rule::Mean => (a.iter().zip(&c))
                    .map(|(a, c)| a + (c - a) / (n as f32 + 1.0))
                    .collect(),
            };
            TensorData::new(out, shape).convert_dtype(dtype)
        }
    };
    Ok(data)
}

/// EMAWeightAveraging's settings (Lightning's names and defaults).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmaConfig {
    /// How much of the average each update keeps.
    pub decay: f64,
    /// Update after every n-th optimizer step (0: never after steps).
    pub update_every_n_steps: u64,
    /// Update after steps only from this step index (0-based) on.
    pub update_starting_at_step: Option<u64>,
    /// Update at the end of each epoch from this epoch (0-based) on.
    pub update_starting_at_epoch: Option<u64>,
}

impl Default for EmaConfig {
    fn default() -> Self {
        Self {
            decay: 0.999,
            update_every_n_steps: 1,
            update_starting_at_step: None,
            update_starting_at_epoch: None,
        }
    }
}

/// What a checkpoint keeps of an averaging callback besides its tensors.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(super) struct Counters {
    /// The global step of the latest update after a step.
    pub(super) latest_update_step: u64,
    /// The epoch of the latest update at an epoch's start or end.
    pub(super) latest_update_epoch: Option<u64>,
    /// The average's updates (kept by [`AveragedWeights`]; here for the checkpoint).
    n_averaged: u64,
}

impl Counters {
    /// The checkpoint's JSON of these counters and `averaged`'s count.
    pub(super) fn state(&self, averaged: &AveragedWeights) -> Option<Value> {
        let counters = Self {
            n_averaged: averaged.n_averaged,
            ..*self
        };
        serde_json::to_value(counters).ok()
    }

    /// The counters in `state`; `averaged` takes its count.
    pub(super) fn load(state: &Value, averaged: &mut AveragedWeights) -> anyhow::Result<Self> {
        let counters: Self = serde_json::from_value(state.clone())?;
        averaged.n_averaged = counters.n_averaged;
        Ok(counters)
    }
}

/// Keeps an exponential moving average of the model's weights (parameters and batch-norm
/// statistics): updated after optimizer steps (and epochs) as [`EmaConfig`] says, swapped into
/// the model for every validation pass, saved as the checkpoint's weights (the weights training
/// continues from are saved beside them, so a resumed fit continues exactly), and loaded into
/// the model when `fit` ends. Lightning's `EMAWeightAveraging`.
#[derive(Debug, Clone)]
pub struct EMAWeightAveraging {
    config: EmaConfig,
    averaged: AveragedWeights,
    counters: Counters,
}

impl EMAWeightAveraging {
    /// A callback with these settings; `decay` must be in [0, 1].
    pub fn new(config: EmaConfig) -> PlanResult<Self> {
        if !(0.0..=1.0).contains(&config.decay) {
            return Err(FlagError::new(
                "--trainer.callbacks",
                config.decay.to_string(),
                "EMAWeightAveraging decay must be a number in [0, 1]",
            ));
        }
        Ok(Self {
            config,
            averaged: AveragedWeights::default(),
            counters: Counters::default(),
        })
    }

    /// The average as it stands.
    pub fn averaged(&self) -> &AveragedWeights {
        &self.averaged
    }

    /// Whether to update after optimizer step `step_idx` or epoch `epoch_idx` (0-based; one
    /// of them is given), as Lightning's `should_update` decides.
    pub fn should_update(&self, step_idx: Option<u64>, epoch_idx: Option<u64>) -> bool {
        let c = &self.config;
        let by_step = step_idx.is_some_and(|step| {
            c.update_starting_at_step.is_none_or(|start| step >= start)
                && c.update_every_n_steps > 0
                && step % c.update_every_n_steps == 0
        });
        let by_epoch = epoch_idx
            .zip(c.update_starting_at_epoch)
            .is_some_and(|(epoch, start)| epoch >= start);
        by_step || by_epoch
    }

    fn update(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let rule = Rule::Ema {
            decay: self.config.decay,
        };
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.update(w, rule))
            .unwrap_or(Ok(()))
    }
}

impl Callback for EMAWeightAveraging {
    fn name(&self) -> &str {
        "EMAWeightAveraging"
    }

    fn state(&self) -> Option<Value> {
        self.counters.state(&self.averaged)
    }

    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        self.counters = Counters::load(state, &mut self.averaged)?;
        Ok(())
    }

    fn on_save_checkpoint(&self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        self.averaged.save_as_weights(checkpoint);
        Ok(())
    }

    fn on_load_checkpoint(&mut self, checkpoint: &mut CheckpointTensors<'_>) -> anyhow::Result<()> {
        if checkpoint.own.is_empty() {
            tracing::warn!(
                target: "ember",
                "the checkpoint was not written with EMAWeightAveraging: the average starts at its weights"
            );
        }
        self.averaged.load_from_weights(checkpoint);
        Ok(())
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.start(w));
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let step = ctx.state.global_step;
        if step > self.counters.latest_update_step && self.should_update(Some(step - 1), None) {
            self.update(ctx)?;
            self.counters.latest_update_step = step;
        }
        Ok(())
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let epoch = ctx.state.epoch;
        let later = self.counters.latest_update_epoch.is_none_or(|e| epoch > e);
        if later && self.should_update(None, Some(epoch)) {
            self.update(ctx)?;
            self.counters.latest_update_epoch = Some(epoch);
        }
        Ok(())
    }

    fn on_validation_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.swap_in(w)).unwrap_or(Ok(()))
    }

    fn on_validation_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.swap_out(w)).unwrap_or(Ok(()))
    }

    fn on_fit_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let averaged = &mut self.averaged;
        ctx.with_weights(|w| averaged.copy_in(w)).unwrap_or(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use burn::nn::{Linear, LinearConfig};

    use super::*;
    use crate::plugins::weights::ModelWeights;
    use crate::trainer::checkpoint::weights_of;

    type B = burn_autodiff::Autodiff<burn_flex::Flex>;

    fn ema(config: EmaConfig) -> EMAWeightAveraging {
        EMAWeightAveraging::new(config).unwrap()
    }

    #[test]
    fn updates_follow_lightnings_should_update() {
        // Lightning's EMAWeightAveraging.should_update: every n-th step index from a start,
        // and epochs only from update_starting_at_epoch.
        let every_3 = ema(EmaConfig {
            update_every_n_steps: 3,
            update_starting_at_step: Some(4),
            ..Default::default()
        });
        let steps: Vec<u64> = (0..12)
            .filter(|&s| every_3.should_update(Some(s), None))
            .collect();
        assert_eq!(steps, [6, 9]);
        assert!(!every_3.should_update(None, Some(5)));
        let by_epoch = ema(EmaConfig {
            update_every_n_steps: 0,
            update_starting_at_epoch: Some(2),
            ..Default::default()
        });
        assert!(!by_epoch.should_update(Some(0), None));
        assert!(!by_epoch.should_update(None, Some(1)));
        assert!(by_epoch.should_update(None, Some(2)));
        assert!(
            EMAWeightAveraging::new(EmaConfig {
                decay: 1.5,
                ..Default::default()
            })
            .is_err()
        );
    }

    fn value(model: &Linear<B>) -> Vec<f32> {
        model.weight.val().into_data().to_vec().unwrap()
    }

    #[test]
    fn a_checkpoint_holds_the_average_as_weights_also_while_validation_swapped_it_in() {
        let device = Default::default();
        let mut model: Linear<B> = LinearConfig::new(2, 1).init(&device);
        let mut averaged = AveragedWeights::default();
        averaged.start(&ModelWeights::<B, _>::new(&mut model));
        let rule = Rule::Ema { decay: 0.5 };
        let mut step = |model: &mut Linear<B>| {
            model.weight = model.weight.clone().map(|w| w.add_scalar(1.0));
            let weights = ModelWeights::<B, _>::new(model);
            averaged.update(&weights, rule).unwrap();
            value(model)
        };
        let first = step(&mut model);
        let trained = step(&mut model);
        assert_eq!(averaged.n_averaged(), 2);
        let average: Vec<f32> = first
            .iter()
            .zip(&trained)
            .map(|(a, b)| a * 0.5 + b * 0.5)
            .collect();
        let held = |averaged: &AveragedWeights| -> Vec<f32> {
            averaged.average[&model.weight.id].to_vec().unwrap()
        };
        assert_eq!(held(&averaged), average, "the first update copies");
        // Saved normally, and saved while validation holds the average: the same file contents.
        let save = |model: &Linear<B>, averaged: &AveragedWeights| {
            let mut weights = weights_of::<B, _>(model).unwrap();
            let mut own = BTreeMap::new();
            averaged.save_as_weights(&mut CheckpointTensors {
                weights: &mut weights,
                own: &mut own,
            });
            (weights, own)
        };
        let (weights, own) = save(&model, &averaged);
        averaged
            .swap_in(&mut ModelWeights::<B, _>::new(&mut model))
            .unwrap();
        assert_eq!(value(&model), average, "validation sees the average");
        let (while_swapped, own_swapped) = save(&model, &averaged);
        assert_eq!((&weights, &own), (&while_swapped, &own_swapped));
        assert_eq!(own["weight"].to_vec::<f32>().unwrap(), trained);
        assert_eq!(weights[0].2.to_vec::<f32>().unwrap(), average);
        averaged
            .swap_out(&mut ModelWeights::<B, _>::new(&mut model))
            .unwrap();
        assert_eq!(
            value(&model),
            trained,
            "training continues from its own weights"
        );
        // Loading gives back the average and the weights training continues from.
        let mut restored = AveragedWeights::default();
        let (mut weights, mut own) = (weights, own);
        restored.load_from_weights(&mut CheckpointTensors {
            weights: &mut weights,
            own: &mut own,
        });
        assert_eq!(weights[0].2.to_vec::<f32>().unwrap(), trained);
        assert_eq!(restored.average, averaged.average);
    }
}
