//! The digits job: what `digits fit` runs on the accelerator the plan selects.

use anyhow::bail;
use ember::{Accelerator, Invocation, Job, Plan, Stage, strategy::SINGLE_DEVICE};

use crate::model::ModelConfig;
use crate::train::{DataConfig, FitReport, fit_by_hand};

/// Epochs when `--trainer.max_epochs` is not given.
pub const DEFAULT_EPOCHS: u64 = 30;

/// A digits run, built from the CLI's invocation.
#[derive(Debug, Clone)]
pub struct DigitsJob {
    /// The subcommand.
    pub stage: Stage,
    /// The `model` section.
    pub model: ModelConfig,
    /// The `data` section.
    pub data: DataConfig,
    /// Epochs to train.
    pub epochs: u64,
}

impl From<Invocation<ModelConfig, DataConfig>> for DigitsJob {
    fn from(inv: Invocation<ModelConfig, DataConfig>) -> Self {
        Self {
            stage: inv.stage,
            model: inv.model,
            data: inv.data,
            epochs: inv.trainer.max_epochs.unwrap_or(DEFAULT_EPOCHS),
        }
    }
}

impl Job for DigitsJob {
    type Output = FitReport;

    fn run<A: Accelerator>(self, plan: &Plan) -> anyhow::Result<FitReport> {
        if self.stage != Stage::Fit {
            bail!(
                "`digits {}` needs ember's Trainer, which is not built yet; only `fit` runs today",
                self.stage.name()
            );
        }
        if plan.strategy != SINGLE_DEVICE {
            bail!(
                "strategy {} is planned (devices {:?}) but multi-process training is not built yet; use --trainer.devices=1",
                plan.strategy,
                plan.devices
            );
        }
        let device = A::parallel_devices(&[plan.local_device()]).remove(0);
        let epochs = usize::try_from(self.epochs)?;
        let (_, report) =
            fit_by_hand::<A::Backend>(&device, &self.model, &self.data, epochs, |epoch, acc| {
                println!("epoch {:>3}/{epochs}  val_acc {acc:.4}", epoch + 1);
            })?;
        println!(
            "trained {} steps in {:.2} s ({:.0} steps/s) on {}; final val_acc {:.4}",
            report.steps,
            report.seconds,
            report.steps_per_second(),
            plan.accelerator,
            report.val_accuracy.last().copied().unwrap_or(0.0)
        );
        Ok(report)
    }
}
