//! One call runs any model from the command line (Lightning's `LightningCLI(Model, DataModule)`).
//!
//! An application says how to build its model on any backend and its data module from their
//! config sections ([`App`]); [`AppJob`] is the job the CLI runs for it: fit, validate, test
//! or predict on the accelerator the plan selects, with the checkpoint `ckpt_path` names, the
//! merged config recorded as hyperparameters, and a summary of the run on stdout.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::PathBuf;

use burn::tensor::backend::AutodiffBackend;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::accelerator::Accelerator;
use crate::callbacks::BuiltCallbacks;
use crate::cli::{Cli, Invocation};
use crate::context::RunContext;
use crate::flags::TrainerFlags;
use crate::job::Job;
use crate::loggers::shown;
use crate::options::TrainerOptions;
use crate::plan::Plan;
use crate::registry::{Registry, RegistryError};
use crate::stage::Stage;
use crate::trainer::data::DataModule;
use crate::trainer::module::{BatcherFor, TrainingModule};
use crate::trainer::{FitOutcome, Trainer};

/// An application: a model buildable on every backend from its config, and its data module.
///
/// As in Lightning's `LightningCLI(Model, DataModule)`, the `data` section of the config is
/// the data module itself: the CLI reads `--data.KEY=VALUE` (and config files) into
/// [`App::Data`], whose `Default` gives the defaults; state it builds in
/// [`DataModule::setup`] stays out of the config with `#[serde(skip)]`. The `model` section
/// is read into [`App::ModelConfig`], from which [`App::model`] builds the model on whichever
/// backend the run uses. Either may be a serde struct or burn's `#[derive(Config)]` (whose
/// `Default` is then `Self::new()`, the `#[config(default = …)]` values).
///
/// ```ignore
/// impl ember::App for Digits {
///     const NAME: &'static str = "digits";
///     const ABOUT: &'static str = "Train an MLP on 8x8 handwritten digits";
///     type ModelConfig = ModelConfig;
///     type Data = DigitsData;
///     type Model<B: AutodiffBackend> = DigitsModel<B>;
///
///     fn model<B: AutodiffBackend>(config: &ModelConfig, device: &B::Device) -> DigitsModel<B> {
///         DigitsModel::new(config, device)
///     }
/// }
/// ```
pub trait App: 'static {
    /// The program's name, as `--help` shows it; by default the file name it was started as.
    const NAME: &'static str = "";
    /// One line about the program for `--help`; by default none.
    const ABOUT: &'static str = "";
    /// The `model` section of the config (`--model.KEY=VALUE`); its `Default` is the default.
    type ModelConfig: Serialize + DeserializeOwned + Default;
    /// The data module, read from the `data` section of the config (`--data.KEY=VALUE`); its
    /// `Default` is the default.
    type Data: DataModule + Serialize + DeserializeOwned + Default;
    /// The model on autodiff backend `B`.
    type Model<B: AutodiffBackend>: RunsWith<B, Self::Data>;

    /// A freshly initialised model on `device` (the Trainer has seeded the backend).
    fn model<B: AutodiffBackend>(config: &Self::ModelConfig, device: &B::Device) -> Self::Model<B>;

    /// The trainer flags' defaults for this program (e.g. its own `max_epochs`).
    fn trainer_defaults() -> TrainerFlags {
        TrainerFlags::default()
    }

    /// Registers the program's own accelerators, strategies and plugins on `registry`, which
    /// holds every accelerator the build enables, so that `ember::run` stays the whole `main`.
    /// By default it adds none.
    fn register(registry: Registry<AppJob<Self>>) -> Result<Registry<AppJob<Self>>, RegistryError>
    where
        Self: Sized,
    {
        Ok(registry)
    }
}

impl<M, D> Cli<M, D>
where
    M: Serialize + DeserializeOwned + Default,
    D: Serialize + DeserializeOwned + Default,
{
    /// The CLI of application `A`: its name, about line, config defaults and trainer
    /// defaults. Run it with a registry of [`AppJob`]s: `cli.run(&registry, AppJob::from)`.
    pub fn for_app<A: App<ModelConfig = M, Data = D>>() -> Self {
        Self::new(A::NAME, A::ABOUT, M::default(), D::default())
            .with_trainer_defaults(A::trainer_defaults())
    }
}

/// A model config that builds its model, as burn's configs do with `init`. With its data
/// module it is a whole application: `fn main() -> ExitCode { ember::run::<(ModelConfig,
/// MyData)>() }`, named after the file the program was started as. An [`App`] of the
/// program's own gives it a name, trainer defaults and plugins.
///
/// ```ignore
/// impl InitModel<PointData> for ModelConfig {
///     type Model<B: AutodiffBackend> = Classifier<B>;
///
///     fn init<B: AutodiffBackend>(&self, device: &B::Device) -> Classifier<B> {
///         Classifier::new(self, device)
///     }
/// }
/// ```
pub trait InitModel<D: DataModule>: Serialize + DeserializeOwned + Default + 'static {
    /// The model on autodiff backend `B`.
    type Model<B: AutodiffBackend>: RunsWith<B, D>;

    /// A freshly initialised model on `device` (the Trainer has seeded the backend).
    fn init<B: AutodiffBackend>(&self, device: &B::Device) -> Self::Model<B>;
}

impl<C, D> App for (C, D)
where
    C: InitModel<D>,
    D: DataModule + Serialize + DeserializeOwned + Default + 'static,
{
    type ModelConfig = C;
    type Data = D;
    type Model<B: AutodiffBackend> = C::Model<B>;

    fn model<B: AutodiffBackend>(config: &C, device: &B::Device) -> C::Model<B> {
        config.init(device)
    }
}

/// The Trainer's entry points for model `Self` on data `D`: implemented for every
/// [`TrainingModule`] whose data module's batcher makes its batches, so that [`App::Model`]
/// can promise them for every backend.
pub trait RunsWith<B: AutodiffBackend, D: DataModule>: TrainingModule<B> {
    /// [`Trainer::fit`].
    fn fit(trainer: &mut Trainer<B>, model: Self, data: &mut D)
    -> anyhow::Result<FitOutcome<Self>>;

    /// [`Trainer::validate`] or [`Trainer::test`] (by `stage`) of the model's inner module.
    fn evaluate(
        trainer: &mut Trainer<B>,
        stage: Stage,
        model: Self,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>>;

    /// [`Trainer::predict_each`] with the model's inner module, as JSON.
    fn predict(
        trainer: &mut Trainer<B>,
        model: Self,
        data: &mut D,
    ) -> anyhow::Result<Vec<Vec<Value>>>;
}

impl<B, D, M> RunsWith<B, D> for M
where
    B: AutodiffBackend,
    D: DataModule,
    M: TrainingModule<B>,
    D::Batcher: BatcherFor<B, D::Item, M>,
{
    fn fit(trainer: &mut Trainer<B>, model: Self, data: &mut D) -> anyhow::Result<FitOutcome<M>> {
        trainer.fit(model, data)
    }

    fn evaluate(
        trainer: &mut Trainer<B>,
        stage: Stage,
        model: Self,
        data: &mut D,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        if stage == Stage::Test {
            trainer.test(model.valid(), data)
        } else {
            trainer.validate(model.valid(), data)
        }
    }

    fn predict(
        trainer: &mut Trainer<B>,
        model: Self,
        data: &mut D,
    ) -> anyhow::Result<Vec<Vec<Value>>> {
        trainer.predict_each(model.valid(), data)
    }
}

/// What an [`AppJob`] produced.
#[derive(Debug, Clone, PartialEq)]
pub enum AppOutput {
    /// `fit`.
    Fit {
        /// Optimizer steps this fit took.
        steps: u64,
        /// Optimizer steps in all, those before the checkpoint it resumed from included.
        global_step: u64,
        /// Wall time of the fit loop.
        seconds: f64,
        /// The latest value of every metric.
        metrics: BTreeMap<String, f64>,
        /// The best (or latest) checkpoint written.
        best_model_path: Option<PathBuf>,
    },
    /// `validate` / `test`: the pass's metrics.
    Metrics(BTreeMap<String, f64>),
    /// `predict`: each batch's prediction, one list per predict loader (rank 0; empty lists
    /// on the other ranks).
    Predictions(Vec<Vec<Value>>),
}

/// The job the CLI runs for application `A`: built from the invocation, run on any
/// accelerator.
pub struct AppJob<A: App> {
    stage: Stage,
    model: A::ModelConfig,
    data: A::Data,
    options: TrainerOptions,
    hparams: Value,
    /// The options' callbacks, built while planning.
    callbacks: BuiltCallbacks,
    app: PhantomData<A>,
}

impl<A: App> From<Invocation<A::ModelConfig, A::Data>> for AppJob<A> {
    fn from(inv: Invocation<A::ModelConfig, A::Data>) -> Self {
        let hparams = crate::cli::config_tree(&inv.trainer, &inv.model, &inv.data, &inv.optimizers);
        Self {
            stage: inv.stage,
            model: inv.model,
            data: inv.data,
            options: inv.trainer.options,
            hparams,
            callbacks: inv.callbacks,
            app: PhantomData,
        }
    }
}

impl<A: App> Job for AppJob<A> {
    type Output = AppOutput;

    fn run<X: Accelerator>(self, context: &RunContext) -> anyhow::Result<AppOutput> {
        let plan = &context.plan;
        let mut hparams = self.hparams;
        let mut data = self.data;
        if let Some(settings) = self.options.batch_size_find.as_ref()
            && self.stage == Stage::Fit
        {
            crate::batch_size_find::before_fit(settings, &mut data, &mut hparams)?;
        }
        hparams["plan"] = serde_json::to_value(plan)?;
        let mut trainer = Trainer::<X::Backend>::builder_for(context, self.options)
            .callbacks(self.callbacks)
            .build::<X>()?
            .with_hparams(hparams);
        // Under ddp every rank runs this; rank 0 speaks for the run.
        let rank0 = plan.global_rank == 0;
        if rank0 && self.stage != Stage::Fit && trainer.options().ckpt_path.is_none() {
            eprintln!(
                "warning: no --trainer.ckpt_path given: `{}` runs on freshly initialised weights",
                self.stage.name()
            );
        }
        let model = A::model::<X::Backend>(&self.model, trainer.device());
        let output = match self.stage {
            Stage::Fit => {
                let out = RunsWith::fit(&mut trainer, model, &mut data)?;
                AppOutput::Fit {
                    steps: out.steps,
                    global_step: out.global_step,
                    seconds: out.seconds,
                    metrics: out.metrics,
                    best_model_path: out.best_model_path,
                }
            }
            Stage::Validate | Stage::Test => AppOutput::Metrics(RunsWith::evaluate(
                &mut trainer,
                self.stage,
                model,
                &mut data,
            )?),
            Stage::Predict => {
                AppOutput::Predictions(RunsWith::predict(&mut trainer, model, &mut data)?)
            }
        };
        if rank0 {
            report(&output, plan)?;
        }
        Ok(output)
    }
}

/// Prints what a run produced: fit's summary line, the metrics one per line, or the
/// predictions one per line (a batch's list is spread over lines; with several predict
/// loaders each line is `{"dataloader_idx": N, "prediction": ...}`).
fn report(output: &AppOutput, plan: &Plan) -> anyhow::Result<()> {
    match output {
        AppOutput::Fit {
            steps,
            global_step,
            seconds,
            metrics,
            best_model_path,
        } => {
            let mut line = format!("trained {steps} step{}", if *steps == 1 { "" } else { "s" });
            if global_step != steps {
                line.push_str(&format!(" (to global step {global_step})"));
            }
            line.push_str(&format!(
                " in {seconds:.2} s ({:.0} steps/s) on {}",
                *steps as f64 / seconds,
                plan.accelerator
            ));
            if plan.world_size > 1 {
                line.push_str(&format!(" ({} processes)", plan.world_size));
            } else if plan.drives_every_device() {
                line.push_str(&format!(" ({} devices, one process)", plan.devices.len()));
            }
            for (name, value) in metrics {
                line.push_str(&format!("; {name} {}", shown(*value)));
            }
            if let Some(path) = best_model_path {
                line.push_str(&format!("; checkpoint {}", path.display()));
            }
            println!("{line}");
        }
        AppOutput::Metrics(metrics) => {
            for (name, value) in metrics {
                println!("{name} {}", shown(*value));
            }
        }
        AppOutput::Predictions(loaders) => print_lines(prediction_lines(loaders))?,
    }
    Ok(())
}

/// The lines `predict` prints: every item of every batch (a batch's list spread over lines),
/// each tagged with its loader when there are several.
fn prediction_lines(loaders: &[Vec<Value>]) -> impl Iterator<Item = Value> + '_ {
    let several = loaders.len() > 1;
    (loaders.iter().enumerate()).flat_map(move |(index, batches)| {
        batches
            .iter()
            .flat_map(|batch| match batch {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                one => vec![one],
            })
            .map(move |item| match several {
                true => serde_json::json!({"dataloader_idx": index, "prediction": item}),
                false => item.clone(),
            })
    })
}

/// Prints one JSON value per line; a closed pipe (`app predict | head`) ends quietly.
fn print_lines(values: impl Iterator<Item = Value>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = values
        .into_iter()
        .try_for_each(|v| writeln!(out, "{v}"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::prediction_lines;

    #[test]
    fn predictions_print_one_item_per_line_tagged_by_loader_when_there_are_several() {
        let one = [vec![json!([1, 2]), json!(3)]];
        let lines: Vec<_> = prediction_lines(&one).collect();
        assert_eq!(lines, [json!(1), json!(2), json!(3)]);
        let two = [vec![json!([1, 2])], vec![json!("x")]];
        let lines: Vec<_> = prediction_lines(&two).collect();
        assert_eq!(
            lines,
            [
                json!({"dataloader_idx": 0, "prediction": 1}),
                json!({"dataloader_idx": 0, "prediction": 2}),
                json!({"dataloader_idx": 1, "prediction": "x"}),
            ]
        );
    }
}
