//! BackboneFinetuning: a model's `backbone` frozen until an epoch, then trained at a rising
//! share of the learning rate (Lightning's `BackboneFinetuning`).

use serde::Deserialize;

use super::{Callback, CallbackContext};
use crate::error::{FlagError, PlanResult};

/// How a module is frozen: whether its batch-norm layers stay trainable (Lightning's
/// `train_bn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freeze {
    /// Keep batch-norm layers inside the module trainable.
    pub train_bn: bool,
}

/// BackboneFinetuning's settings (Lightning's names and defaults, where it has them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackboneFinetuningConfig {
    /// Module path of the backbone (Lightning requires a `backbone` attribute).
    pub backbone: String,
    /// The epoch whose start unfreezes the backbone.
    pub unfreeze_backbone_at_epoch: u64,
    /// What the backbone's rate is multiplied by at each later epoch's start (Lightning's
    /// default `lambda_func`, a constant 1.5).
    pub multiplier: f64,
    /// The backbone's share of the rate in the epoch it is unfrozen.
    pub backbone_initial_ratio_lr: f64,
    /// Never let the backbone's rate exceed the rest of the model's.
    pub should_align: bool,
    /// Keep the backbone's batch-norm layers trainable while it is frozen.
    pub train_bn: bool,
}

impl Default for BackboneFinetuningConfig {
    fn default() -> Self {
        Self {
            backbone: "backbone".into(),
            unfreeze_backbone_at_epoch: 10,
            multiplier: 1.5,
            backbone_initial_ratio_lr: 0.1,
            should_align: true,
            train_bn: true,
        }
    }
}

/// Freezes the backbone when `fit` starts and unfreezes it at `unfreeze_backbone_at_epoch`,
/// from when its parameters step at `backbone_initial_ratio_lr × multiplier^k` of the rate in
/// the k-th epoch after (at most the whole rate with `should_align`).
///
/// Unlike Lightning, which gives the backbone a parameter group with a rate of its own, the
/// backbone's rate is a share of the scheduler's: a scheduler lowers both alike. The share is
/// a function of the epoch, so a resumed fit gets the share the uninterrupted one had.
#[derive(Debug, Clone)]
pub struct BackboneFinetuning {
    config: BackboneFinetuningConfig,
}

impl BackboneFinetuning {
    /// A callback with these settings; rates must be finite and positive.
    pub fn new(config: BackboneFinetuningConfig) -> PlanResult<Self> {
        for (name, value) in [
            ("multiplier", config.multiplier),
            (
                "backbone_initial_ratio_lr",
                config.backbone_initial_ratio_lr,
            ),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(FlagError::new(
                    "--trainer.callbacks",
                    value.to_string(),
                    format!("BackboneFinetuning {name} must be a number > 0"),
                ));
            }
        }
        Ok(Self { config })
    }

    /// The backbone's share of the learning rate in `epoch`; `None` while it is frozen.
    pub fn share(&self, epoch: u64) -> Option<f64> {
        let c = &self.config;
        let after = epoch.checked_sub(c.unfreeze_backbone_at_epoch)?;
        let mut share = c.backbone_initial_ratio_lr;
        for _ in 0..after {
            share *= c.multiplier;
            if c.should_align {
                share = share.min(1.0);
            }
        }
        Some(share)
    }

    fn freeze(&self, ctx: &mut CallbackContext<'_>) {
        let c = &self.config;
        let freeze = Freeze {
            train_bn: c.train_bn,
        };
        ctx.state.frozen_modules.insert(c.backbone.clone(), freeze);
        ctx.state.lr_factors.remove(&c.backbone);
    }
}

impl Callback for BackboneFinetuning {
    fn name(&self) -> &str {
        "BackboneFinetuning"
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.freeze(ctx);
        Ok(())
    }

    fn on_train_epoch_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        match self.share(ctx.state.epoch) {
            None => self.freeze(ctx),
            Some(share) => {
                let backbone = &self.config.backbone;
                ctx.state.frozen_modules.remove(backbone);
                ctx.state.lr_factors.insert(backbone.clone(), share);
                tracing::debug!(target: "ember", "BackboneFinetuning: {backbone} at {share} of the rate");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_rises_from_the_unfreezing_epoch_and_aligns_with_the_rate() {
        let callback = |should_align| {
            BackboneFinetuning::new(BackboneFinetuningConfig {
                unfreeze_backbone_at_epoch: 2,
                should_align,
                ..Default::default()
            })
            .unwrap()
        };
        let aligned = callback(true);
        let shares: Vec<_> = (0..10).map(|e| aligned.share(e)).collect();
        assert_eq!(shares[..2], [None, None]);
        assert_eq!(shares[2], Some(0.1));
        assert_eq!(shares[3], Some(0.1 * 1.5));
        assert_eq!(shares[7], Some(0.1 * 1.5 * 1.5 * 1.5 * 1.5 * 1.5));
        assert_eq!(
            shares[8],
            Some(1.0),
            "0.1 x 1.5^6 > 1: aligned with the rate"
        );
        assert_eq!(shares[9], Some(1.0));
        assert!(callback(false).share(8).unwrap() > 1.0);
        let bad = BackboneFinetuningConfig {
            multiplier: 0.0,
            ..Default::default()
        };
        assert!(BackboneFinetuning::new(bad).is_err());
    }

    #[test]
    fn the_cli_names_it_with_its_settings() {
        let spec = |init_args| crate::options::CallbackSpec {
            class_path: "lightning.pytorch.callbacks.BackboneFinetuning".into(),
            init_args,
        };
        let args = serde_json::json!({"unfreeze_backbone_at_epoch": 3, "backbone": "encoder"});
        let callback =
            crate::registered::build::callback(&spec(args), &crate::registered::Plugins::builtin())
                .unwrap();
        assert_eq!(callback.name(), "BackboneFinetuning");
        let typo = serde_json::json!({"unfreeze_at": 3});
        let e =
            crate::registered::build::callback(&spec(typo), &crate::registered::Plugins::builtin())
                .err()
                .unwrap();
        assert!(e.message.contains("unfreeze_at"), "{e}");
    }
}
