//! Weight averaging: [`AveragedWeights`], an average of the model's weights kept beside it, which
//! EMAWeightAveraging (`ema.rs`) and StochasticWeightAveraging (`swa.rs`) keep (Lightning's
//! `WeightAveraging` and torch's `AveragedModel`).

use std::collections::HashMap;

use anyhow::{Context, ensure};
use burn::module::ParamId;
use burn::tensor::{DType, TensorData};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CheckpointTensors;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use burn::nn::{Linear, LinearConfig};

    use super::*;
    use crate::plugins::weights::ModelWeights;
    use crate::trainer::checkpoint::weights_of;

    type B = burn_autodiff::Autodiff<burn_flex::Flex>;

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
