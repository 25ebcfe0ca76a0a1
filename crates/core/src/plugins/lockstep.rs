//! Collectives checked to be in step. Every rank of a run must make the same collective calls
//! in the same order with the same lengths; a rank that skips one (a hook that runs on one rank
//! only, a decision taken per rank) otherwise meets a different call on the other side, and
//! the transport fails with an error of its own (`MPI_ERR_TRUNCATE`), corrupts, or hangs.
//!
//! [`Lockstep`] wraps a run's collective: before each operation the ranks exchange what they
//! are about to do (a fixed-size record: which operation, its reduction, its length, how many
//! calls came before, the global step), and if any rank differs, every rank stops with the same
//! [`AgreedError`] naming each rank's call, so the run ends with ember's own message, printed
//! once. The exchange always matches (its size never varies), whatever the ranks called.
//! [`LockstepDevice`] checks a device collective's calls the same way, over the host.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use burn::tensor::TensorMetadata;

use crate::agreed::AgreedError;
use crate::collective::{Collective, KeyValueStore, ReduceOp};
use crate::plugins::device_reduce::DeviceCollective;

thread_local! {
    /// The global step of the fit running on this thread (collectives run on the thread of the
    /// Trainer's loop): what a disagreement reports.
    static STEP: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Records `step` as the global step the loop on this thread is at (`None` outside `fit`).
pub(crate) fn at_step(step: Option<u64>) {
    STEP.with(|s| s.set(step));
}

/// One rank's next call, as the ranks compare it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Call {
    /// Calls this rank made before this one.
    index: u64,
    op: Op,
    /// Elements (bytes for broadcasts and gathers; the root for a broadcast is in `op`).
    len: u64,
    /// The global step, plus one (0: outside `fit`).
    step: u64,
}

/// The operations, as one number each (with the reduction or the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Barrier,
    AllReduceF32(ReduceOp),
    AllReduceF64(ReduceOp),
    AllReduceMeanF32,
    AllReduceMeanF64,
    Broadcast { root: u64 },
    AllGather,
    ReduceScatterF32(ReduceOp),
    ReduceScatterF64(ReduceOp),
    AllGatherInto,
    KeyValueStore,
    Device,
}

/// Bytes of one [`Call`] record: four little-endian u64 words.
const RECORD: usize = 32;

/// The last code of a broadcast (1000 + its root, a rank below 2³²).
const BROADCAST_END: u64 = 1000 + u32::MAX as u64;

impl Op {
    fn code(self) -> u64 {
        let reduce = |op: ReduceOp| match op {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
        };
        match self {
            Op::Barrier => 1,
            Op::AllReduceF32(r) => 10 + reduce(r),
            Op::AllReduceF64(r) => 20 + reduce(r),
            Op::Broadcast { root } => 1000 + root,
            Op::AllGather => 2,
            Op::ReduceScatterF32(r) => 30 + reduce(r),
            Op::ReduceScatterF64(r) => 40 + reduce(r),
            Op::AllGatherInto => 3,
            Op::KeyValueStore => 4,
            Op::Device => 5,
            Op::AllReduceMeanF32 => 6,
            Op::AllReduceMeanF64 => 7,
        }
    }

    fn from_code(code: u64) -> Option<Op> {
        let reduce = |r: u64| {
            [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]
                .get(r as usize)
                .copied()
        };
        Some(match code {
            1 => Op::Barrier,
            2 => Op::AllGather,
            3 => Op::AllGatherInto,
            4 => Op::KeyValueStore,
            5 => Op::Device,
            6 => Op::AllReduceMeanF32,
            7 => Op::AllReduceMeanF64,
            10..=12 => Op::AllReduceF32(reduce(code - 10)?),
            20..=22 => Op::AllReduceF64(reduce(code - 20)?),
            30..=32 => Op::ReduceScatterF32(reduce(code - 30)?),
            40..=42 => Op::ReduceScatterF64(reduce(code - 40)?),
            root @ 1000..=BROADCAST_END => Op::Broadcast { root: root - 1000 },
            _ => return None,
        })
    }
}

impl Call {
    fn encode(self) -> [u8; RECORD] {
        let mut bytes = [0; RECORD];
        let words = [self.index, self.op.code(), self.len, self.step];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Call> {
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        (bytes.len() == RECORD).then_some(())?;
        Some(Call {
            index: word(0),
            op: Op::from_code(word(1))?,
            len: word(2),
            step: word(3),
        })
    }

    /// The call as a message names it, e.g. `all_reduce_f32 (sum) of 4096 values (its call
    /// #57, at global step 12)`.
    fn describe(&self) -> String {
        let reduce = |r: ReduceOp| format!("{r:?}").to_lowercase();
        let what = match self.op {
            Op::Barrier => "barrier".to_owned(),
            Op::AllReduceF32(r) => format!("all_reduce_f32 ({}) of {} values", reduce(r), self.len),
            Op::AllReduceF64(r) => format!("all_reduce_f64 ({}) of {} values", reduce(r), self.len),
            Op::AllReduceMeanF32 => format!("all_reduce_mean_f32 of {} values", self.len),
            Op::AllReduceMeanF64 => format!("all_reduce_mean_f64 of {} values", self.len),
            Op::Broadcast { root } => format!("broadcast from rank {root}"),
            Op::AllGather => "all_gather".to_owned(),
            Op::ReduceScatterF32(r) => {
                format!("reduce_scatter_f32 ({}) of {} values", reduce(r), self.len)
            }
            Op::ReduceScatterF64(r) => {
                format!("reduce_scatter_f64 ({}) of {} values", reduce(r), self.len)
            }
            Op::AllGatherInto => format!("all_gather_into of {} bytes", self.len),
            Op::KeyValueStore => "key_value_store".to_owned(),
            Op::Device => format!(
                "the device collective's all_reduce_sum of {} values",
                self.len
            ),
        };
        let step = match self.step {
            0 => String::new(),
            step => format!(", at global step {}", step - 1),
        };
        format!("{what} (its call #{}{step})", self.index + 1)
    }
}

/// A run's collective whose every call is first compared across the ranks (see the module).
pub(crate) struct Lockstep {
    inner: Rc<dyn Collective>,
    calls: Cell<u64>,
    /// Each rank's part of the exchange (one record), and the reused buffer it fills: made
    /// once, not at every call.
    counts: Vec<usize>,
    gathered: RefCell<Vec<u8>>,
}

impl Lockstep {
    /// `inner`, checked.
    pub(crate) fn new(inner: Rc<dyn Collective>) -> Self {
        let world = inner.world_size();
        Self {
            inner,
            calls: Cell::new(0),
            counts: vec![RECORD; world],
            gathered: RefCell::new(vec![0; RECORD * world]),
        }
    }

    /// Tells every rank what this one is about to call and fails on every rank, with the same
    /// error, when the ranks differ.
    fn check(&self, op: Op, len: usize) -> anyhow::Result<()> {
        let call = Call {
            index: self.calls.get(),
            op,
            len: len as u64,
            step: STEP.with(Cell::get).map_or(0, |s| s + 1),
        };
        self.calls.set(call.index + 1);
        let mut all = self.gathered.borrow_mut();
        self.inner
            .all_gather_into(&call.encode(), &self.counts, &mut all)?;
        let same = |c: Option<Call>| c.is_some_and(|c| c.op == op && c.len == call.len);
        if all.chunks_exact(RECORD).map(Call::decode).all(same) {
            return Ok(());
        }
        let calls: Vec<Option<Call>> = all.chunks_exact(RECORD).map(Call::decode).collect();
        let listed: Vec<String> = (calls.iter().enumerate())
            .map(|(rank, c)| match c {
                Some(c) => format!("rank {rank} called {}", c.describe()),
                None => format!("rank {rank} sent a record this ember cannot read"),
            })
            .collect();
        Err(AgreedError {
            rank: 0,
            code: 1,
            message: format!(
                "the ranks are out of step: their next collective operations differ ({}); every rank must \
                 make the same collective calls in the same order (a hook or decision that runs on some \
                 ranks only must not call the collective)",
                listed.join("; ")
            ),
        }
        .into())
    }
}

impl Collective for Lockstep {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn barrier(&self) -> anyhow::Result<()> {
        self.check(Op::Barrier, 0)?;
        self.inner.barrier()
    }

    fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> anyhow::Result<()> {
        self.check(Op::AllReduceF32(op), buf.len())?;
        self.inner.all_reduce_f32(buf, op)
    }

    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp) -> anyhow::Result<()> {
        self.check(Op::AllReduceF64(op), buf.len())?;
        self.inner.all_reduce_f64(buf, op)
    }

    fn all_reduce_mean_f32(&self, buf: &mut [f32]) -> anyhow::Result<()> {
        self.check(Op::AllReduceMeanF32, buf.len())?;
        self.inner.all_reduce_mean_f32(buf)
    }

    fn all_reduce_mean_f64(&self, buf: &mut [f64]) -> anyhow::Result<()> {
        self.check(Op::AllReduceMeanF64, buf.len())?;
        self.inner.all_reduce_mean_f64(buf)
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> anyhow::Result<()> {
        // Lengths may differ before a broadcast.
        self.check(Op::Broadcast { root: root as u64 }, 0)?;
        self.inner.broadcast(buf, root)
    }

    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        // Lengths may differ between ranks.
        self.check(Op::AllGather, 0)?;
        self.inner.all_gather(bytes)
    }

    fn reduce_scatter_f32(
        &self,
        buf: &[f32],
        counts: &[usize],
        out: &mut [f32],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        self.check(Op::ReduceScatterF32(op), buf.len())?;
        self.inner.reduce_scatter_f32(buf, counts, out, op)
    }

    fn reduce_scatter_f64(
        &self,
        buf: &[f64],
        counts: &[usize],
        out: &mut [f64],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        self.check(Op::ReduceScatterF64(op), buf.len())?;
        self.inner.reduce_scatter_f64(buf, counts, out, op)
    }

    fn all_gather_into(
        &self,
        bytes: &[u8],
        counts: &[usize],
        out: &mut [u8],
    ) -> anyhow::Result<()> {
        self.check(Op::AllGatherInto, out.len())?;
        self.inner.all_gather_into(bytes, counts, out)
    }

    fn key_value_store(&self) -> anyhow::Result<Arc<dyn KeyValueStore>> {
        self.check(Op::KeyValueStore, 0)?;
        self.inner.key_value_store()
    }

    fn abort(&self, code: i32) -> ! {
        self.inner.abort(code)
    }
}

/// A device collective whose calls are compared across the ranks over the host's
/// [`Lockstep`] first. `P` is the tensor primitive its calls carry (the accelerator's inner
/// backend's float tensor), whose length the ranks compare.
pub(crate) struct LockstepDevice<P> {
    inner: Box<dyn DeviceCollective>,
    host: Rc<Lockstep>,
    primitive: PhantomData<P>,
}

impl<P> LockstepDevice<P> {
    pub(crate) fn new(inner: Box<dyn DeviceCollective>, host: Rc<Lockstep>) -> Self {
        Self {
            inner,
            host,
            primitive: PhantomData,
        }
    }
}

impl<P: TensorMetadata + 'static> DeviceCollective for LockstepDevice<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn all_reduce_sum(&self, flat: &mut dyn Any) -> anyhow::Result<()> {
        let len = (flat.downcast_ref::<P>()).map_or(0, |t| t.shape().num_elements());
        self.host.check(Op::Device, len)?;
        self.inner.all_reduce_sum(flat)
    }
}

#[cfg(test)]
mod tests;
