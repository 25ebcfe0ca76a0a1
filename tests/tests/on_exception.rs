//! OnExceptionCheckpoint, against Lightning's (its tests in
//! `tests/tests_pytorch/callbacks/test_on_exception_checkpoint.py`): when fit fails, from a
//! callback's error or a panic in `training_step`, a checkpoint of the last completed step is
//! written (to the run's checkpoint directory unless told otherwise) and fit resumed from it
//! ends as an uninterrupted fit does, bitwise. ModelCheckpoint's `save_on_exception` does the
//! same beside its own checkpoints.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use burn::module::Module;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{
    Callback, CallbackContext, ModelCheckpoint, ModelCheckpointConfig, OnExceptionCheckpoint,
    OnExceptionCheckpointConfig,
};
use ember::checkpoint::Checkpoint;
use ember::{
    FitOutcome, Hparams, LightningModule, Optimizers, StepLog, Trainer, TrainerOptions,
    TrainingModule, optim,
};
use ember_acceptance::regression::{Batch, Regression, data, quiet_options, serial, weight_bits};

type B = Autodiff<Flex>;

/// Set by [`Arm`]: the next `training_step` of a [`Fragile`] model panics.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The regression model, whose `training_step` panics once [`ARMED`].
#[derive(Module, Debug)]
struct Fragile<B: Backend> {
    inner: Regression<B>,
}

impl<B: AutodiffBackend> TrainingModule<B> for Fragile<B> {
    type Optimizer = optim::Sgd<Self, B>;
    type Scheduler = f64;

    fn configure_optimizers(
        &self,
        _: &Hparams,
    ) -> anyhow::Result<Optimizers<Self::Optimizer, f64>> {
        Ok(Optimizers::sgd(self.inner.lr))
    }
}

impl<B: Backend> LightningModule<B> for Fragile<B> {
    type Batch = Batch<B>;

    fn training_step(&self, batch: Batch<B>, log: &mut StepLog<B>) -> Tensor<B, 1> {
        assert!(!ARMED.load(Ordering::SeqCst), "a poisoned batch");
        self.inner.training_step(batch, log)
    }

    fn validation_step(&self, batch: Batch<B>, log: &mut StepLog<B>) {
        self.inner.validation_step(batch, log)
    }
}

/// After the optimizer step `at`, fails with an error, or arms [`Fragile`]'s panic.
struct Arm {
    at: u64,
    panic: bool,
}

impl Callback for Arm {
    fn name(&self) -> &str {
        "Arm"
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        match (ctx.state.global_step == self.at, self.panic) {
            (true, true) => ARMED.store(true, Ordering::SeqCst),
            (true, false) => anyhow::bail!("the disk is full"),
            (false, _) => {}
        }
        Ok(())
    }
}

/// Options for a quiet 3-epoch run (4 training batches an epoch) writing under `root`.
fn options(root: &Path) -> TrainerOptions {
    quiet_options(root, 3)
}

fn fit(
    options: TrainerOptions,
    callbacks: Vec<Box<dyn Callback>>,
) -> anyhow::Result<FitOutcome<Fragile<B>>> {
    ARMED.store(false, Ordering::SeqCst);
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)?.with_callbacks(callbacks);
    let model = Fragile {
        inner: Regression::new(trainer.device()),
    };
    trainer.fit(model, &mut data(40, 20, 10))
}

fn weights(model: &Fragile<B>) -> Vec<u32> {
    weight_bits(&model.inner)
}

fn global_step(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    Checkpoint::decode(&bytes, path).unwrap().header.global_step
}

/// Fails a fit after step 6 (a callback's error, or a panic in the next training step), with
/// OnExceptionCheckpoint writing to `dirpath`; the checkpoint it wrote.
fn failing_fit(root: &Path, panic: bool, dirpath: Option<PathBuf>) -> PathBuf {
    let saver = OnExceptionCheckpoint::new(OnExceptionCheckpointConfig {
        dirpath: dirpath.clone(),
        ..OnExceptionCheckpointConfig::default()
    });
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(Arm { at: 6, panic }), Box::new(saver)];
    let run = catch_unwind(AssertUnwindSafe(|| fit(options(root), callbacks)));
    match run {
        Ok(Ok(_)) => panic!("the fit did not fail"),
        Ok(Err(e)) => assert!(
            !panic && format!("{e:#}").contains("the disk is full"),
            "{e:#}"
        ),
        Err(_) => assert!(panic, "the fit panicked"),
    }
    ARMED.store(false, Ordering::SeqCst);
    let dir = dirpath.unwrap_or_else(|| root.join("lightning_logs/version_0/checkpoints"));
    dir.join("on_exception.ckpt")
}

#[test]
fn an_error_leaves_a_checkpoint_of_the_last_step_that_resumes_exactly() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = fit(options(dir.path()), vec![]).unwrap();
    assert_eq!(whole.global_step, 12);

    let root = dir.path().join("failing");
    let path = failing_fit(&root, false, None);
    assert_eq!(global_step(&path), 6);
    // `last` finds it: it has the most steps in the run's checkpoint directories.
    let resumed = TrainerOptions {
        ckpt_path: Some("last".into()),
        ..options(&root)
    };
    let resumed = fit(resumed, vec![]).unwrap();
    assert_eq!(resumed.global_step, 12);
    assert_eq!(weights(&resumed.model), weights(&whole.model));
}

#[test]
fn a_panic_in_training_step_leaves_a_checkpoint_and_goes_on() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = fit(options(dir.path()), vec![]).unwrap();

    let root = dir.path().join("panicking");
    let chosen = root.join("saved");
    let path = failing_fit(&root, true, Some(chosen.clone()));
    assert_eq!(path, chosen.join("on_exception.ckpt"));
    assert_eq!(global_step(&path), 6);
    let resumed = TrainerOptions {
        ckpt_path: Some(path),
        ..options(&root)
    };
    let resumed = fit(resumed, vec![]).unwrap();
    assert_eq!(weights(&resumed.model), weights(&whole.model));
}

#[test]
fn without_the_callback_a_failure_writes_nothing_of_its_own() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let o = TrainerOptions {
        enable_checkpointing: false,
        ..options(dir.path())
    };
    let e = fit(
        o,
        vec![Box::new(Arm {
            at: 6,
            panic: false,
        })],
    )
    .err();
    assert!(e.is_some());
    assert!(
        !dir.path()
            .join("lightning_logs/version_0/checkpoints")
            .exists()
    );
}

/// ModelCheckpoint's `save_on_exception` (Lightning 2.5's): the failed fit's last completed
/// step saved under the template's name, and as `last.ckpt` with `save_last`, beside its top
/// k; it resumes exactly.
#[test]
fn model_checkpoint_saves_on_exception_when_asked() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let whole = fit(options(dir.path()), vec![]).unwrap();
    for save_on_exception in [false, true] {
        let root = dir.path().join(format!("failing-{save_on_exception}"));
        let checkpoint = ModelCheckpoint::new(ModelCheckpointConfig {
            save_last: true,
            save_on_exception,
            ..ModelCheckpointConfig::default()
        });
        let arm = Arm {
            at: 6,
            panic: false,
        };
        let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(arm), Box::new(checkpoint)];
        assert!(fit(options(&root), callbacks).is_err());
        let saved = root.join("lightning_logs/version_0/checkpoints");
        let mut names: Vec<String> = (std::fs::read_dir(&saved).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        match save_on_exception {
            // Epoch 0 (4 steps) ended with a save; the failure came after step 6.
            false => assert_eq!(names, ["epoch=0-step=4.ckpt", "last.ckpt"]),
            true => {
                assert_eq!(
                    names,
                    ["epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"]
                );
                assert_eq!(global_step(&saved.join("last.ckpt")), 6);
                let resumed = TrainerOptions {
                    ckpt_path: Some(saved.join("epoch=1-step=6.ckpt")),
                    ..options(&root)
                };
                let resumed = fit(resumed, vec![]).unwrap();
                assert_eq!(weights(&resumed.model), weights(&whole.model));
            }
        }
    }
}
