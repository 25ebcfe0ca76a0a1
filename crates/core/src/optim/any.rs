//! burn's built-in optimizers and schedulers as one type each, chosen at run time: what a
//! model declares to take the optimizer and scheduler the run's config names
//! (`type Optimizer = ember::optim::AnyOptimizer<Self, B>; type Scheduler =
//! ember::optim::AnyScheduler;`).

use std::collections::HashMap;

use burn::module::{AutodiffModule, ParamId};
use burn::optim::lr_scheduler::LrScheduler;
use burn::optim::lr_scheduler::cosine::CosineAnnealingLrScheduler;
use burn::optim::lr_scheduler::exponential::ExponentialLrScheduler;
use burn::optim::lr_scheduler::linear::LinearLrScheduler;
use burn::optim::lr_scheduler::step::StepLrScheduler;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::record::{PrecisionSettings, Record};
use burn::tensor::DType;
use burn::tensor::backend::{AutodiffBackend, Backend};
use serde::{Deserialize, Serialize};

use super::{Adam, AdamW, ExactState, OptimizerState, Sgd};

/// Adam, AdamW or SGD for module `M` on backend `B`, as
/// [`OptimizerSpec::init`](super::OptimizerSpec::init) made it; its state is saved exactly.
#[derive(Clone)]
pub enum AnyOptimizer<M: AutodiffModule<B>, B: AutodiffBackend> {
    /// Adam.
    Adam(Adam<M, B>),
    /// AdamW.
    AdamW(AdamW<M, B>),
    /// SGD.
    Sgd(Sgd<M, B>),
}

/// Calls `$f` on whichever optimizer `$o` holds, as `$x`.
macro_rules! each {
    ($o:expr, $x:ident => $f:expr) => {
        match $o {
            AnyOptimizer::Adam($x) => $f,
            AnyOptimizer::AdamW($x) => $f,
            AnyOptimizer::Sgd($x) => $f,
        }
    };
}

/// [`AnyOptimizer`]'s record: the record of the optimizer it holds.
pub enum AnyOptimizerRecord<M: AutodiffModule<B>, B: AutodiffBackend> {
    /// Adam's.
    Adam(RecordOf<Adam<M, B>, M, B>),
    /// AdamW's.
    AdamW(RecordOf<AdamW<M, B>, M, B>),
    /// SGD's.
    Sgd(RecordOf<Sgd<M, B>, M, B>),
}

/// An optimizer's record.
type RecordOf<O, M, B> = <O as Optimizer<M, B>>::Record;

/// The serializable item of record `R`.
type ItemOf<R, B, S> = <R as Record<B>>::Item<S>;

/// [`AnyOptimizerRecord`] as a serializable item.
#[derive(Clone, Serialize, Deserialize)]
pub enum AnyOptimizerItem<A, W, S> {
    /// Adam's.
    Adam(A),
    /// AdamW's.
    AdamW(W),
    /// SGD's.
    Sgd(S),
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Record<B> for AnyOptimizerRecord<M, B> {
    type Item<S: PrecisionSettings> = AnyOptimizerItem<
        ItemOf<RecordOf<Adam<M, B>, M, B>, B, S>,
        ItemOf<RecordOf<AdamW<M, B>, M, B>, B, S>,
        ItemOf<RecordOf<Sgd<M, B>, M, B>, B, S>,
    >;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        match self {
            Self::Adam(r) => AnyOptimizerItem::Adam(r.into_item()),
            Self::AdamW(r) => AnyOptimizerItem::AdamW(r.into_item()),
            Self::Sgd(r) => AnyOptimizerItem::Sgd(r.into_item()),
        }
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, device: &B::Device) -> Self {
        match item {
            AnyOptimizerItem::Adam(i) => Self::Adam(Record::from_item::<S>(i, device)),
            AnyOptimizerItem::AdamW(i) => Self::AdamW(Record::from_item::<S>(i, device)),
            AnyOptimizerItem::Sgd(i) => Self::Sgd(Record::from_item::<S>(i, device)),
        }
    }
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizer<M, B> for AnyOptimizer<M, B> {
    type Record = AnyOptimizerRecord<M, B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        each!(self, o => o.step(lr, module, grads))
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        each!(self, o => o.step_multi(lr, module, grads))
    }

    fn to_record(&self) -> Self::Record {
        match self {
            Self::Adam(o) => AnyOptimizerRecord::Adam(o.to_record()),
            Self::AdamW(o) => AnyOptimizerRecord::AdamW(o.to_record()),
            Self::Sgd(o) => AnyOptimizerRecord::Sgd(o.to_record()),
        }
    }

    /// Loads a record of the same kind; one of another kind (a checkpoint of another
    /// optimizer) leaves the state as it was: the Trainer reads checkpoints through
    /// [`ExactState`], which refuses that with an error.
    fn load_record(self, record: Self::Record) -> Self {
        match (self, record) {
            (Self::Adam(o), AnyOptimizerRecord::Adam(r)) => Self::Adam(o.load_record(r)),
            (Self::AdamW(o), AnyOptimizerRecord::AdamW(r)) => Self::AdamW(o.load_record(r)),
            (Self::Sgd(o), AnyOptimizerRecord::Sgd(r)) => Self::Sgd(o.load_record(r)),
            (same, _) => same,
        }
    }
}

impl<M, B> ExactState<M, B> for AnyOptimizer<M, B>
where
    M: AutodiffModule<B> + 'static,
    B: AutodiffBackend + 'static,
{
    fn state(&self, dtypes: &HashMap<ParamId, DType>) -> Option<anyhow::Result<OptimizerState>> {
        each!(self, o => o.state(dtypes))
    }

    fn state_bytes(&self, param_bytes: &HashMap<ParamId, u64>) -> Option<Vec<(ParamId, u64)>> {
        each!(self, o => o.state_bytes(param_bytes))
    }

    /// Refuses the state of another optimizer (a checkpoint of a run trained with another).
    fn with_state(self, state: OptimizerState, device: &B::Device) -> Option<anyhow::Result<Self>> {
        let kind = match &self {
            Self::Adam(_) => "adam",
            Self::AdamW(_) => "adamw",
            Self::Sgd(_) => "sgd",
        };
        if let Some(other) = state.values().find(|s| s.kind != kind) {
            return Some(Err(anyhow::anyhow!(
                "the checkpoint holds {} optimizer state, but this run's optimizer is {kind}: resume with the optimizer it was trained with",
                other.kind
            )));
        }
        Some(match self {
            Self::Adam(o) => o.with_state(state, device)?.map(Self::Adam),
            Self::AdamW(o) => o.with_state(state, device)?.map(Self::AdamW),
            Self::Sgd(o) => o.with_state(state, device)?.map(Self::Sgd),
        })
    }
}

/// A constant rate or one of burn's schedulers, as
/// [`SchedulerSpec::init`](super::SchedulerSpec::init) made it.
#[derive(Clone)]
pub enum AnyScheduler {
    /// A constant rate.
    Constant(LearningRate),
    /// torch's `StepLR`.
    Step(StepLrScheduler),
    /// torch's `ExponentialLR`.
    Exponential(ExponentialLrScheduler),
    /// torch's `CosineAnnealingLR`.
    Cosine(CosineAnnealingLrScheduler),
    /// torch's `LinearLR`.
    Linear(LinearLrScheduler),
}

/// [`AnyScheduler`]'s record: the record of the scheduler it holds.
#[derive(Record, Clone)]
pub enum AnySchedulerRecord<B: Backend> {
    /// A constant rate's.
    Constant(<LearningRate as LrScheduler>::Record<B>),
    /// `StepLR`'s.
    Step(<StepLrScheduler as LrScheduler>::Record<B>),
    /// `ExponentialLR`'s.
    Exponential(<ExponentialLrScheduler as LrScheduler>::Record<B>),
    /// `CosineAnnealingLR`'s.
    Cosine(<CosineAnnealingLrScheduler as LrScheduler>::Record<B>),
    /// `LinearLR`'s.
    Linear(<LinearLrScheduler as LrScheduler>::Record<B>),
}

/// Calls `$f` on whichever scheduler `$s` holds, as `$x`.
macro_rules! each_scheduler {
    ($s:expr, $x:ident => $f:expr) => {
        match $s {
            AnyScheduler::Constant($x) => $f,
            AnyScheduler::Step($x) => $f,
            AnyScheduler::Exponential($x) => $f,
            AnyScheduler::Cosine($x) => $f,
            AnyScheduler::Linear($x) => $f,
        }
    };
}

impl LrScheduler for AnyScheduler {
    type Record<B: Backend> = AnySchedulerRecord<B>;

    fn step(&mut self) -> LearningRate {
        each_scheduler!(self, s => s.step())
    }

    fn to_record<B: Backend>(&self) -> Self::Record<B> {
        match self {
            // A constant rate's record is `()`.
            Self::Constant(_) => AnySchedulerRecord::Constant(()),
            Self::Step(s) => AnySchedulerRecord::Step(s.to_record::<B>()),
            Self::Exponential(s) => AnySchedulerRecord::Exponential(s.to_record::<B>()),
            Self::Cosine(s) => AnySchedulerRecord::Cosine(s.to_record::<B>()),
            Self::Linear(s) => AnySchedulerRecord::Linear(s.to_record::<B>()),
        }
    }

    /// Loads a record of the same kind; with one of another kind (a checkpoint of a run with
    /// another scheduler) it starts afresh, and says so.
    fn load_record<B: Backend>(self, record: Self::Record<B>) -> Self {
        use AnySchedulerRecord as R;
        match (self, record) {
            (Self::Constant(s), R::Constant(r)) => Self::Constant(s.load_record::<B>(r)),
            (Self::Step(s), R::Step(r)) => Self::Step(s.load_record::<B>(r)),
            (Self::Exponential(s), R::Exponential(r)) => Self::Exponential(s.load_record::<B>(r)),
            (Self::Cosine(s), R::Cosine(r)) => Self::Cosine(s.load_record::<B>(r)),
            (Self::Linear(s), R::Linear(r)) => Self::Linear(s.load_record::<B>(r)),
            (fresh, _) => {
                tracing::warn!(
                    target: "ember",
                    "the checkpoint's learning-rate scheduler is not this run's: the scheduler starts afresh"
                );
                fresh
            }
        }
    }
}
