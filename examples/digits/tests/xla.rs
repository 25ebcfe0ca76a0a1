//! The digits fit on the xla accelerator (XLA's CPU plugin here): accuracy, and how many
//! programs the lazy backend compiles. Its own test binary, so that the process's compile
//! cache counts this fit alone.
#![cfg(feature = "tpu-xla")]

use std::cell::RefCell;
use std::rc::Rc;

use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::{Callback, CallbackContext};
use ember::xla::{XlaAccelerator, backend::stats};
use ember::{Accelerator, Trainer, TrainerOptions};

/// Programs compiled so far, at the end of each training epoch.
struct CompilesPerEpoch(Rc<RefCell<Vec<usize>>>);

impl Callback for CompilesPerEpoch {
    fn name(&self) -> &str {
        "CompilesPerEpoch"
    }

    fn on_train_epoch_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.0.borrow_mut().push(stats().compiles);
        Ok(())
    }
}

#[test]
fn a_three_epoch_fit_compiles_a_handful_of_programs_and_none_after_the_first_epoch() {
    if !XlaAccelerator::is_available() {
        eprintln!("skip: no PJRT plugin (scripts/setup.sh caches XLA's CPU plugin)");
        return;
    }
    let device = XlaAccelerator::parallel_devices(&[0]).remove(0);
    type B = <XlaAccelerator as Accelerator>::Backend;
    let dir = tempfile::tempdir().unwrap();
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(3),
        enable_progress_bar: false,
        default_root_dir: dir.path().to_owned(),
        ..TrainerOptions::default()
    };
    let per_epoch = Rc::new(RefCell::new(Vec::new()));
    let mut trainer = Trainer::<B>::on_accelerator::<XlaAccelerator>(device, options)
        .unwrap()
        .with_callback(CompilesPerEpoch(per_epoch.clone()));
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    let total = stats();
    let per_epoch = per_epoch.borrow().clone();
    eprintln!("compiles at each epoch's end: {per_epoch:?}; {total:?}");
    assert_eq!(per_epoch.len(), 3);
    assert!(
        total.compiles <= 8,
        "{} programs for a 3-epoch fit",
        total.compiles
    );
    assert_eq!(
        per_epoch[2], per_epoch[0],
        "epochs 2 and 3 compiled new programs: {per_epoch:?}"
    );
    assert_eq!(
        total.compiles, per_epoch[2],
        "compiled after the last epoch"
    );
    assert!(
        total.hits > 60,
        "the steady step did not hit the cache: {total:?}"
    );
    assert!(out.metrics["val_acc"] > 0.85, "{:?}", out.metrics);
}
