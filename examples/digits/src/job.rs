//! The digits job: what `digits fit|validate|test|predict` runs on the accelerator the plan
//! selects, through ember's Trainer.

use burn::tensor::backend::AutodiffBackend;
use ember::{Accelerator, Invocation, Job, Plan, Stage, Trainer, TrainerOptions};
use serde_json::{Value, json};

use crate::data::DigitsData;
use crate::model::{DigitsModel, ModelConfig};
use crate::train::DataConfig;

/// Epochs when `--trainer.max_epochs` is not given.
pub const DEFAULT_EPOCHS: u64 = 30;
/// Seed when `--trainer.seed` is not given.
pub const DEFAULT_SEED: u64 = 42;

/// A digits run, built from the CLI's invocation.
#[derive(Debug, Clone)]
pub struct DigitsJob {
    /// The subcommand.
    pub stage: Stage,
    /// The `model` section.
    pub model: ModelConfig,
    /// The `data` section.
    pub data: DataConfig,
    /// The Trainer's loop options.
    pub options: TrainerOptions,
    /// The whole merged config, recorded as hyperparameters (with the resolved plan).
    pub hparams: Value,
}

impl From<Invocation<ModelConfig, DataConfig>> for DigitsJob {
    fn from(inv: Invocation<ModelConfig, DataConfig>) -> Self {
        let hparams = json!({
            "trainer": inv.trainer.to_value(),
            "model": serde_json::to_value(&inv.model).unwrap_or(Value::Null),
            "data": serde_json::to_value(&inv.data).unwrap_or(Value::Null),
        });
        Self {
            stage: inv.stage,
            model: inv.model,
            data: inv.data,
            options: inv.trainer.options,
            hparams,
        }
    }
}

/// What a digits run produced.
#[derive(Debug, Clone, PartialEq)]
pub enum DigitsOutput {
    /// `fit`: optimizer steps, seconds, and the final metrics.
    Fit {
        /// Optimizer steps.
        steps: u64,
        /// Wall time of the fit loop.
        seconds: f64,
        /// Latest `val_acc`.
        val_acc: Option<f64>,
    },
    /// `validate` / `test`: the pass's metrics.
    Metrics(std::collections::BTreeMap<String, f64>),
    /// `predict`: the predicted digit of each held-out image.
    Predictions(Vec<i64>),
}

impl Job for DigitsJob {
    type Output = DigitsOutput;

    fn run<A: Accelerator>(self, plan: &Plan) -> anyhow::Result<DigitsOutput> {
        let mut hparams = self.hparams.clone();
        hparams["plan"] = serde_json::to_value(plan)?;
        let mut trainer =
            Trainer::<A::Backend>::new::<A>(plan, self.options.clone())?.with_hparams(hparams);
        let mut data = DigitsData::new(self.data.clone());
        run_stage(&mut trainer, &self, &mut data, plan)
    }
}

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

fn run_stage<B: AutodiffBackend>(
    trainer: &mut Trainer<B>,
    job: &DigitsJob,
    data: &mut DigitsData,
    plan: &Plan,
) -> anyhow::Result<DigitsOutput> {
    // Under ddp every rank runs this; rank 0 speaks for the run.
    let rank0 = plan.global_rank == 0;
    if rank0 && job.stage != Stage::Fit && job.options.ckpt_path.is_none() {
        eprintln!(
            "warning: no --trainer.ckpt_path given: `{}` runs on freshly initialised weights",
            job.stage.name()
        );
    }
    let device = trainer.device().clone();
    match job.stage {
        Stage::Fit => {
            let model = DigitsModel::<B>::new(&job.model, &device);
            let out = trainer.fit(model, data)?;
            let val_acc = out.metrics.get("val_acc").copied();
            if rank0 {
                println!(
                    "trained {} steps in {:.2} s ({:.0} steps/s) on {}; val_acc {}{}",
                    out.global_step,
                    out.seconds,
                    out.global_step as f64 / out.seconds,
                    plan.accelerator,
                    val_acc.map_or("n/a".into(), |a| format!("{a:.4}")),
                    out.best_model_path
                        .map(|p| format!("; checkpoint {}", p.display()))
                        .unwrap_or_default()
                );
            }
            Ok(DigitsOutput::Fit {
                steps: out.global_step,
                seconds: out.seconds,
                val_acc,
            })
        }
        Stage::Validate | Stage::Test => {
            let model = DigitsModel::<Inner<B>>::new(&job.model, &device);
            let metrics = if job.stage == Stage::Test {
                trainer.test(model, data)?
            } else {
                trainer.validate(model, data)?
            };
            for (name, value) in metrics.iter().filter(|_| rank0) {
                println!("{name} {value:.4}");
            }
            Ok(DigitsOutput::Metrics(metrics))
        }
        Stage::Predict => {
            let model = DigitsModel::<Inner<B>>::new(&job.model, &device);
            let predictions: Vec<i64> = trainer.predict(model, data)?.concat();
            if rank0 {
                print_lines(&predictions)?;
            }
            Ok(DigitsOutput::Predictions(predictions))
        }
    }
}

/// Prints one value per line; a closed pipe (`digits predict | head`) ends quietly.
fn print_lines(values: &[i64]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = values
        .iter()
        .try_for_each(|v| writeln!(out, "{v}"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
