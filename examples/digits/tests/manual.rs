//! docs/trainer.md's Trainer without the command line, compiled as the page shows it and run
//! on cpu: fit, then test the fitted model.

use std::path::Path;

use burn::module::AutodiffModule;
use digits::data::DigitsData;
use digits::model::{DigitsModel as MyModel, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::Callback;
use ember::cpu::CpuAccelerator;
use ember::{Accelerator, Plan, Precision, Trainer, TrainerOptions};

/// A callback that does nothing but be there, as the page's `MyCallback`.
struct MyCallback;

impl Callback for MyCallback {
    fn name(&self) -> &str {
        "MyCallback"
    }
}

/// The page's snippet, for any accelerator `A`: the fitted model's test metrics. (Not
/// formatted: its comments line up as the page shows them.)
#[rustfmt::skip]
fn fit_then_test<A: Accelerator>(
    plan: Plan,
    options: TrainerOptions,
    config: ModelConfig,
    mut data: DigitsData,
) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let mut trainer = Trainer::<A::Backend>::new::<A>(&plan, options)?   // seeds the backend
        .with_hparams(serde_json::to_value(&config)?)                    // → hparams.yaml
        .with_callback(MyCallback);
    let model = MyModel::new(&config, trainer.device());                 // after new(): seeded weights
    let out = trainer.fit(model, &mut data)?;                            // FitOutcome: model, metrics, best_model_path …
    let metrics = trainer.test(out.model.valid(), &mut data)?;
    Ok(metrics)
}

fn one_epoch(root: &Path) -> TrainerOptions {
    TrainerOptions {
        seed: Some(42),
        max_epochs: Some(1),
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        ..TrainerOptions::default()
    }
}

#[test]
fn the_manuals_trainer_without_the_cli_fits_and_tests() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::local("cpu", Precision::F32True);
    let data = DigitsData::new(DataConfig::default());
    let config = ModelConfig::default();
    let metrics = fit_then_test::<CpuAccelerator>(plan, one_epoch(dir.path()), config, data);
    let metrics = metrics.unwrap();
    assert!(metrics["test_acc"] > 0.5, "{metrics:?}");
    assert!(
        dir.path()
            .join("lightning_logs/version_0/hparams.yaml")
            .is_file()
    );
}
