//! `curves.png`: the metrics of a run drawn as one panel per metric family, written beside
//! metrics.csv when fit ends (csv logger, rank 0). Checked without looking: the picture
//! decodes, has one 900x320 panel per family, and is not blank.

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::plugins::Env;
use ember::{CliOutcome, Trainer, TrainerOptions};
use ember_acceptance::regression::{Regression, data, serial};
use ember_acceptance::{WhoRuns, execute, registry};

/// The picture's name in a run's log directory.
const CURVES_FILE: &str = "curves.png";

type B = Autodiff<Flex>;

/// Width, height, and the share of pixels that are not white.
fn inspect(png: &std::path::Path) -> (u32, u32, f64) {
    let image = image::open(png).unwrap().to_rgb8();
    let (w, h) = image.dimensions();
    let inked = image.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    (w, h, inked as f64 / f64::from(w * h))
}

#[test]
fn a_fit_with_the_csv_logger_draws_its_curves() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(3),
        max_epochs: Some(4),
        enable_progress_bar: false,
        enable_checkpointing: false,
        logger: vec!["csv".to_owned()],
        log_every_n_steps: 1,
        default_root_dir: dir.path().to_owned(),
        ..TrainerOptions::default()
    };
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options).unwrap();
    let model = Regression::new(trainer.device());
    trainer.fit(model, &mut data(40, 20, 10)).unwrap();
    let png = trainer.log_dir().unwrap().join(CURVES_FILE);
    // The regression logs train_loss and val_loss (one panel: loss), and min_index and
    // max_index (a panel each).
    let (w, h, inked) = inspect(&png);
    assert_eq!((w, h), (900, 3 * 320), "{}", png.display());
    assert!(
        inked > 0.02,
        "only {:.1}% of the picture is drawn",
        inked * 100.0
    );
}

#[test]
fn a_metrics_file_without_metrics_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("metrics.csv"), "step,epoch\n0,0\n").unwrap();
    let log_dir = dir.path().to_str().unwrap();
    let outcome = execute(&registry(), &["plot", log_dir], &Env::new(), || WhoRuns);
    let CliOutcome::Failed { message, .. } = outcome else {
        panic!("plotting no metrics succeeded: {outcome:?}");
    };
    assert!(message.contains("metrics.csv"), "{message}");
    assert!(!dir.path().join(CURVES_FILE).exists());
}
