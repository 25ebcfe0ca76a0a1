//! What the resume tests (ACCEPTANCE 29) observe of a fit: its losses after every batch, bit
//! for bit, a checkpoint written and a stop at a chosen step, and the final float tensors.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember::callbacks::{Callback, CallbackContext};

/// `(global step, train_loss bits)` after every batch.
pub type Losses = Rc<RefCell<Vec<(u64, u64)>>>;

/// Records the losses; with `stop_at`, saves a checkpoint at that step and stops the fit.
pub struct RecordLosses {
    /// Where the losses go.
    pub seen: Losses,
    /// The step to stop at and the checkpoint to write there.
    pub stop_at: Option<(u64, PathBuf)>,
}

impl Callback for RecordLosses {
    fn name(&self) -> &str {
        "RecordLosses"
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

/// The bytes of every float tensor of `model` (weights and running statistics), in visit
/// order and in their own dtypes.
pub fn float_bytes<B: Backend, M: Module<B>>(model: &M) -> Vec<Vec<u8>> {
    struct Bytes(Vec<Vec<u8>>);
    impl<B: Backend> ModuleVisitor<B> for Bytes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(param.val().into_data().as_bytes().to_vec());
        }
    }
    let mut bytes = Bytes(Vec::new());
    model.visit(&mut bytes);
    bytes.0
}

/// burn-flex's generator is one per process: fits (and models built to load checkpoints into)
/// in tests running side by side would draw their initial weights from it in turn. Tests of one
/// binary that compare weights hold this while they use burn-flex, so they take turns.
pub fn flex_generator_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
