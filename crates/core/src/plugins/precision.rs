//! Precision plugins: the numeric policy of a run, as the loop applies it.
//!
//! A precision plugin builds on one of the six named precisions ([`Precision`]), which fixes
//! the device's float type and whether the optimizer's weights are f32 masters; the connector
//! checks that name against what the accelerator runs. The plugin then decides what the loop
//! does with it: which parameters a step computes with in which type, how the loss is scaled,
//! how gradients are unscaled and checked, how they are clipped, and what state it keeps in
//! checkpoints. The built-ins are [`TruePrecision`] and [`MixedPrecision`] (16-mixed with
//! dynamic loss scaling). See `docs/plugins.md`.

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor};
use serde_json::Value;

use crate::options::ClipAlgorithm;
use crate::plugins::access::Gradients;
use crate::plugins::dtype;
use crate::plugins::scaler::GradScaler;
use ember_plan::precision::Precision;

/// A run's numeric policy, chosen by name (`--trainer.precision`, `--trainer.plugins`) or
/// given to the Trainer's builder.
pub trait PrecisionPlugin {
    /// The name it is selected by and shown under.
    fn name(&self) -> &str;

    /// The named precision it builds on: the device's float type, and f32 master weights for
    /// the mixed ones.
    fn precision(&self) -> Precision;

    /// Whether the loop keeps f32 master weights and computes each step with a cast copy
    /// ([`compute_dtype`](Self::compute_dtype) decides each parameter's type).
    fn casts_for_compute(&self) -> bool {
        dtype::mixed_dtype(self.precision()).is_some()
    }

    /// The float type the parameter at `path` (burn's module path, e.g. `mlp.hidden.0`)
    /// computes in during a step; `None` keeps the master's f32. Read only when
    /// [`casts_for_compute`](Self::casts_for_compute) is true.
    fn compute_dtype(&self, path: &str) -> Option<FloatDType> {
        let _ = path;
        dtype::mixed_dtype(self.precision())
    }

    /// The factor the loss is multiplied by before backward (in f32); `None`: no scaling.
    fn loss_scale(&self) -> Option<f64> {
        None
    }

    /// Undoes the loss scale on the (already reduced) gradients and says whether this rank's
    /// gradients allow the optimizer to step. The step is taken on every rank or on none:
    /// skipped when any rank says no (see [`on_step_decided`](Self::on_step_decided)).
    fn unscale_gradients(&mut self, grads: &mut dyn Gradients) -> bool {
        let _ = grads;
        true
    }

    /// Called on every rank with what the ranks decided together about this step: `taken` is
    /// false when any rank's [`before_optimizer_step`](Self::before_optimizer_step) said to skip
    /// it (under a strategy that does not average gradients the ranks' verdicts can differ). A
    /// plugin that keeps state about skipped steps (a dynamic loss scale, a count) updates it
    /// here, so that every rank's state stays the same.
    fn on_step_decided(&mut self, taken: bool) {
        let _ = taken;
    }

    /// Clips the gradients before the optimizer step (`gradient_clip_val` is set).
    fn clip_gradients(
        &mut self,
        grads: &mut dyn Gradients,
        algorithm: ClipAlgorithm,
        threshold: f64,
    ) {
        grads.clip(algorithm, threshold);
    }

    /// Readies the (already reduced) gradients for the optimizer step, as the strategy hands
    /// them over: [unscaled and checked](Self::unscale_gradients), then, when finite,
    /// [clipped](Self::clip_gradients) (`clip`: the algorithm and threshold the options set).
    /// Returns whether the optimizer should step.
    fn before_optimizer_step(
        &mut self,
        grads: &mut dyn Gradients,
        clip: Option<(ClipAlgorithm, f64)>,
    ) -> bool {
        let finite = self.unscale_gradients(grads);
        if let Some((algorithm, threshold)) = clip.filter(|_| finite) {
            self.clip_gradients(grads, algorithm, threshold);
        }
        finite
    }

    /// Its dynamic loss scaler, if it has one (`16-mixed`'s): what `Trainer::grad_scaler`
    /// reads.
    fn grad_scaler(&self) -> Option<&GradScaler> {
        None
    }

    /// Its dynamic loss scaler to change, if it has one: what `Trainer::with_grad_scaler`
    /// sets.
    fn grad_scaler_mut(&mut self) -> Option<&mut GradScaler> {
        None
    }

    /// Values to log with each optimizer step (e.g. `loss_scale`), read once the ranks
    /// decided about the step; they take the path of the model's own step values (every
    /// logger, with the epoch, at `log_every_n_steps`).
    fn step_metrics(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// The checkpoint section its [`state`](Self::state) is saved under (its name by
    /// default); the same convention as a callback's.
    fn state_key(&self) -> String {
        self.name().to_owned()
    }

    /// What a checkpoint keeps of it (Lightning's `state_dict`); `None` (the default) for
    /// nothing.
    fn state(&self) -> Option<Value> {
        None
    }

    /// Restores what [`state`](Self::state) returned, when `fit` resumes from a checkpoint.
    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        let _ = state;
        Ok(())
    }
}

/// Everything in one float type: `32-true`, `64-true`, `16-true`, `bf16-true`.
#[derive(Debug, Clone, Copy)]
pub struct TruePrecision(pub Precision);

impl PrecisionPlugin for TruePrecision {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn precision(&self) -> Precision {
        self.0
    }
}

/// f32 master weights, compute in bf16 or f16; under `16-mixed` the loss is scaled
/// dynamically ([`GradScaler`]) and steps with non-finite gradients are skipped.
#[derive(Debug, Clone)]
pub struct MixedPrecision {
    precision: Precision,
    /// The loss scaler (16-mixed only).
    pub scaler: Option<GradScaler>,
}

impl MixedPrecision {
    /// `bf16-mixed`.
    pub fn bf16() -> Self {
        Self {
            precision: Precision::Bf16Mixed,
            scaler: None,
        }
    }

    /// `16-mixed` with this loss scaler.
    pub fn f16(scaler: GradScaler) -> Self {
        Self {
            precision: Precision::F16Mixed,
            scaler: Some(scaler),
        }
    }
}

impl PrecisionPlugin for MixedPrecision {
    fn name(&self) -> &str {
        self.precision.name()
    }

    fn precision(&self) -> Precision {
        self.precision
    }

    fn loss_scale(&self) -> Option<f64> {
        self.scaler.as_ref().map(|s| s.scale)
    }

    fn unscale_gradients(&mut self, grads: &mut dyn Gradients) -> bool {
        match &self.scaler {
            Some(scaler) => scaler.unscale_gradients(grads),
            None => true,
        }
    }

    fn on_step_decided(&mut self, taken: bool) {
        if let Some(scaler) = &mut self.scaler {
            scaler.update(taken);
        }
    }

    fn grad_scaler(&self) -> Option<&GradScaler> {
        self.scaler.as_ref()
    }

    fn grad_scaler_mut(&mut self) -> Option<&mut GradScaler> {
        self.scaler.as_mut()
    }

    fn step_metrics(&self) -> Vec<(String, f64)> {
        self.scaler.as_ref().map_or_else(Vec::new, |s| {
            vec![
                ("loss_scale".to_owned(), s.scale),
                ("skipped_steps".to_owned(), s.skipped_steps as f64),
            ]
        })
    }

    fn state_key(&self) -> String {
        crate::plugins::scaler::STATE_KEY.to_owned()
    }

    fn state(&self) -> Option<Value> {
        let scaler = self.scaler.as_ref()?;
        Some(serde_json::to_value(scaler).expect("a GradScaler is plain numbers"))
    }

    fn load_state(&mut self, state: &Value) -> anyhow::Result<()> {
        if let Some(scaler) = &mut self.scaler {
            *scaler = serde_json::from_value(state.clone())?;
        }
        Ok(())
    }
}

/// The built-in plugin of a named precision.
pub fn builtin(precision: Precision) -> Box<dyn PrecisionPlugin> {
    match precision {
        Precision::F16Mixed => Box::new(MixedPrecision::f16(GradScaler::default())),
        Precision::Bf16Mixed => Box::new(MixedPrecision::bf16()),
        other => Box::new(TruePrecision(other)),
    }
}

/// `loss` as the backward pass takes it under `plugin`: in f32, multiplied by the plugin's
/// loss scale, when it scales; else as it is. The automatic and manual loops both go through
/// it.
pub fn scale_loss<B: Backend>(plugin: &dyn PrecisionPlugin, loss: Tensor<B, 1>) -> Tensor<B, 1> {
    match plugin.loss_scale() {
        Some(scale) => loss.cast(FloatDType::F32).mul_scalar(scale),
        None => loss,
    }
}

/// The copy of `model` a forward pass runs on under `plugin` when it casts for compute, each
/// parameter in its [compute type](PrecisionPlugin::compute_dtype) (gradients still reach the
/// model's own parameters); `None` when the model computes in its own types (nothing copied).
pub fn compute_copy<B: Backend, M: Module<B>>(
    plugin: &dyn PrecisionPlugin,
    model: &M,
) -> Option<M> {
    plugin
        .casts_for_compute()
        .then(|| dtype::compute_by_path(model.clone(), &|path| plugin.compute_dtype(path)))
}
