//! What `configure_optimizers` returns, checked before `fit` (and the learning-rate finder)
//! starts: whether the model steps its optimizers itself, and that it reads the `optimizer`
//! and `lr_scheduler` config sections when the run has them.

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;

use crate::error::FlagError;
use crate::optim::OptimizerSections;
use crate::trainer::Trainer;
use crate::trainer::hparams::Hparams;
use crate::trainer::module::TrainingModule;

/// Whether `model` steps its optimizers itself (`configure_optimizers` asks for manual
/// optimization). Refuses `optimizer` and `lr_scheduler` config sections that the model's
/// `configure_optimizers` does not read, rather than train with another optimizer than the
/// one asked for.
pub(in crate::trainer) fn is_manual<B, M>(trainer: &Trainer<B>, model: &M) -> anyhow::Result<bool>
where
    B: AutodiffBackend,
    M: TrainingModule<B>,
{
    let hparams = Hparams::new(&trainer.hparams);
    let optimizers = (model.configure_optimizers(&hparams)).context("configure_optimizers")?;
    let sections = OptimizerSections::from_config(hparams.value())?;
    if sections.any() && !optimizers.from_config {
        let (flag, value) = match &sections.optimizer {
            Some(spec) => ("--optimizer", serde_json::to_value(spec)),
            None => (
                "--lr_scheduler",
                serde_json::to_value(&sections.lr_scheduler),
            ),
        };
        let shown = value.map(|v| crate::error::render(&v)).unwrap_or_default();
        return Err(FlagError::new(
            flag,
            shown,
            "a model whose configure_optimizers reads it: this one chooses its own optimizer; declare `type Optimizer = ember::optim::AnyOptimizer<Self, B>` and `type Scheduler = ember::optim::AnyScheduler`, and return `Optimizers::from_hparams(hparams, default)`",
        )
        .into());
    }
    Ok(optimizers.manual)
}
