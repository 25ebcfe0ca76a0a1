//! ACCEPTANCE 29: a run stopped mid-epoch and resumed from its checkpoint continues with the
//! same losses, bitwise, as an uninterrupted run, and ends with the same weights.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::{Callback, CallbackContext};
use ember::{Trainer, TrainerOptions};

type B = Autodiff<Flex>;

/// Records `(step, train_loss)` after every batch; optionally saves a checkpoint and stops
/// the run at step `stop_at`.
struct Losses {
    seen: Rc<RefCell<Vec<(u64, u64)>>>,
    stop_at: Option<(u64, PathBuf)>,
}

impl Callback for Losses {
    fn name(&self) -> &str {
        "Losses"
    }
    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let loss = ctx.state.callback_metrics["train_loss"];
        self.seen
            .borrow_mut()
            .push((ctx.state.global_step, loss.to_bits()));
        if let Some((step, path)) = &self.stop_at
            && ctx.state.global_step == *step
        {
            ctx.save_checkpoint(path)?;
            ctx.state.should_stop = true;
        }
        Ok(())
    }
}

struct Bits(Vec<Vec<u32>>);

impl<B: Backend> ModuleVisitor<B> for Bits {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let values = param.val().into_data().to_vec::<f32>().unwrap();
        self.0.push(values.iter().map(|v| v.to_bits()).collect());
    }
}

fn run(
    root: &Path,
    ckpt_path: Option<PathBuf>,
    stop_at: Option<(u64, PathBuf)>,
) -> (Vec<(u64, u64)>, Vec<Vec<u32>>) {
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(3),
        log_every_n_steps: 1,
        enable_progress_bar: false,
        default_root_dir: root.to_owned(),
        ckpt_path,
        ..TrainerOptions::default()
    };
    let seen = Rc::new(RefCell::new(Vec::new()));
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options)
        .unwrap()
        .with_callback(Losses {
            seen: Rc::clone(&seen),
            stop_at,
        });
    let model = DigitsModel::<B>::new(&ModelConfig::default(), trainer.device());
    let out = trainer
        .fit(model, &mut DigitsData::new(DataConfig::default()))
        .unwrap();
    let mut bits = Bits(Vec::new());
    out.model.visit(&mut bits);
    let losses = seen.borrow().clone();
    (losses, bits.0)
}

#[test]
fn a_resumed_run_continues_bitwise_like_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let (all, weights) = run(dir.path(), None, None);
    assert_eq!(all.len(), 69, "3 epochs of 23 batches");

    // Stop in the middle of the second epoch (step 30 = epoch 1, batch 7), then resume.
    let ckpt = dir.path().join("stopped.ckpt");
    let (first, _) = run(dir.path(), None, Some((30, ckpt.clone())));
    assert_eq!(first.len(), 30);
    let (rest, resumed_weights) = run(dir.path(), Some(ckpt), None);
    assert_eq!(rest.first().map(|(step, _)| *step), Some(31));

    let joined: Vec<(u64, u64)> = first.into_iter().chain(rest).collect();
    assert!(
        joined == all,
        "the resumed run's losses differ from the uninterrupted run's"
    );
    assert!(
        resumed_weights == weights,
        "the resumed run's weights differ from the uninterrupted run's"
    );
}
