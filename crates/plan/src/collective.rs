//! Collectives: what crosses between the processes of a distributed run.
//!
//! ember-plan defines the [`Collective`] trait and the [`Engine`] that starts processes and
//! joins them; a crate with a real transport implements both (`ember-mpi`: OpenMPI through the
//! `mpi` crate). Buffers are host slices: the Trainer moves gradients to the host in buckets,
//! reduces them and moves them back (see `docs/distributed.md`).
//!
//! The CLI joins the engine's collective before it runs a job with more than one process and
//! passes it to the job (ember-core's `RunContext`), which hands it to the Trainer, so a
//! model's code never handles it.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::plan::Plan;

/// How [`Collective::all_reduce_f32`] and friends combine the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

/// The operations ranks perform together. Every rank must call the same operations in the
/// same order with buffers of the same length; a call blocks until all ranks made it.
///
/// Implementations fail loudly rather than hang: a collective that waits past the run's
/// timeout ends the whole run with a message naming the operation and the rank.
pub trait Collective {
    /// This process's rank, `0..world_size`.
    fn rank(&self) -> usize;

    /// Processes in the run.
    fn world_size(&self) -> usize;

    /// Waits until every rank reaches the barrier.
    fn barrier(&self) -> anyhow::Result<()>;

    /// Combines `buf` element-wise across ranks; every rank gets the result.
    fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> anyhow::Result<()>;

    /// Combines `buf` element-wise across ranks; every rank gets the result.
    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp) -> anyhow::Result<()>;

    /// Replaces `buf` on every rank with the element-wise mean over the ranks: bitwise the sum
    /// [`all_reduce_f32`](Self::all_reduce_f32) gives, divided by the world size. The default
    /// divides in a pass of its own; a collective may divide each value as it sums it.
    fn all_reduce_mean_f32(&self, buf: &mut [f32]) -> anyhow::Result<()> {
        self.all_reduce_f32(buf, ReduceOp::Sum)?;
        let ranks = self.world_size() as f32;
        buf.iter_mut().for_each(|x| *x /= ranks);
        Ok(())
    }

    /// [`all_reduce_mean_f32`](Self::all_reduce_mean_f32) in f64.
    fn all_reduce_mean_f64(&self, buf: &mut [f64]) -> anyhow::Result<()> {
        self.all_reduce_f64(buf, ReduceOp::Sum)?;
        let ranks = self.world_size() as f64;
        buf.iter_mut().for_each(|x| *x /= ranks);
        Ok(())
    }

    /// Replaces `buf` on every rank with rank `root`'s bytes (lengths may differ before).
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> anyhow::Result<()>;

    /// Every rank's bytes, in rank order (lengths may differ between ranks).
    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>>;

    /// Combines `buf` element-wise across ranks and leaves each rank only its own part:
    /// `buf` is `counts.len()` consecutive parts, rank r's `counts[r]` long, and this rank's
    /// combined part goes to `out`. `counts` is the same on every rank. The default
    /// all-reduces a copy of `buf` (for collectives without a reduce-scatter of their own).
    fn reduce_scatter_f32(
        &self,
        buf: &[f32],
        counts: &[usize],
        out: &mut [f32],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        let mut all = buf.to_vec();
        self.all_reduce_f32(&mut all, op)?;
        own_part(&all, counts, self.rank(), out)
    }

    /// [`reduce_scatter_f32`](Self::reduce_scatter_f32) in f64.
    fn reduce_scatter_f64(
        &self,
        buf: &[f64],
        counts: &[usize],
        out: &mut [f64],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        let mut all = buf.to_vec();
        self.all_reduce_f64(&mut all, op)?;
        own_part(&all, counts, self.rank(), out)
    }

    /// Every rank's bytes, concatenated in rank order into `out`, whose parts' lengths
    /// (`counts`, one per rank, the same on every rank) are known beforehand; `bytes` is
    /// `counts[rank]` long. The default goes through [`all_gather`](Self::all_gather).
    fn all_gather_into(
        &self,
        bytes: &[u8],
        counts: &[usize],
        out: &mut [u8],
    ) -> anyhow::Result<()> {
        let parts = self.all_gather(bytes)?;
        let mut at = 0;
        for (rank, (part, &count)) in parts.iter().zip(counts).enumerate() {
            anyhow::ensure!(
                part.len() == count,
                "all_gather_into: rank {rank} sent {} bytes, {count} were expected",
                part.len()
            );
            out[at..at + count].copy_from_slice(part);
            at += count;
        }
        Ok(())
    }

    /// A key-value store every rank of the run shares, for a runtime that bootstraps its own
    /// collectives through one (PJRT's distributed runtime). Every rank calls it, at the same
    /// point as the other operations; later calls return the same store, which serves until
    /// the collective is dropped. The default: this collective has none.
    fn key_value_store(&self) -> anyhow::Result<Arc<dyn KeyValueStore>> {
        anyhow::bail!("this collective serves no key-value store")
    }

    /// Ends every process of the run with `code` (after this rank failed): no rank is left
    /// waiting in a collective for this one.
    fn abort(&self, code: i32) -> !;
}

/// Values the ranks of a run share by key, from any thread of any rank: what one puts, every
/// rank can get. Unlike [`Collective`]'s operations, calls need not match across ranks.
pub trait KeyValueStore: Send + Sync {
    /// Sets `key` to `value` (replacing a value put before).
    fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()>;

    /// `key`'s value, waiting up to `timeout` for a rank to put it; `None` if none did.
    fn get(&self, key: &str, timeout: Duration) -> anyhow::Result<Option<Vec<u8>>>;

    /// `key`'s value if a rank has put it, without waiting.
    fn try_get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>>;
}

/// A [`KeyValueStore`] in this process's memory: the store of a one-process run
/// ([`SingleProcess`]), and of threads standing in for processes (tests of a runtime's
/// bootstrap).
#[derive(Debug, Default)]
pub struct LocalKeyValueStore {
    values: Mutex<HashMap<String, Vec<u8>>>,
    /// Signalled at every put, for the gets waiting.
    put: Condvar,
}

impl LocalKeyValueStore {
    fn values(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.values.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl KeyValueStore for LocalKeyValueStore {
    fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        self.values().insert(key.to_owned(), value.to_vec());
        self.put.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> anyhow::Result<Option<Vec<u8>>> {
        let (values, _) = (self.put)
            .wait_timeout_while(self.values(), timeout, |v| !v.contains_key(key))
            .unwrap_or_else(|e| e.into_inner());
        Ok(values.get(key).cloned())
    }

    fn try_get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.values().get(key).cloned())
    }
}

/// Copies this rank's part of `all` (parts of `counts` elements, in rank order) into `out`.
fn own_part<T: Copy>(
    all: &[T],
    counts: &[usize],
    rank: usize,
    out: &mut [T],
) -> anyhow::Result<()> {
    let start: usize = counts[..rank].iter().sum();
    let len = counts[rank];
    anyhow::ensure!(
        start + len <= all.len() && out.len() == len,
        "reduce_scatter: {} elements with parts {counts:?} and an output of {}",
        all.len(),
        out.len()
    );
    out.copy_from_slice(&all[start..start + len]);
    Ok(())
}

/// The collective of a one-process run: every operation is the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl Collective for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn barrier(&self) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_reduce_f32(&self, _: &mut [f32], _: ReduceOp) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_reduce_f64(&self, _: &mut [f64], _: ReduceOp) -> anyhow::Result<()> {
        Ok(())
    }
    fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        Ok(vec![bytes.to_vec()])
    }
    /// The process's one in-memory store.
    fn key_value_store(&self) -> anyhow::Result<Arc<dyn KeyValueStore>> {
        static STORE: OnceLock<Arc<LocalKeyValueStore>> = OnceLock::new();
        Ok(STORE.get_or_init(Arc::default).clone())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// A distributed engine: starts the processes of a local run and joins a process to its run.
pub trait Engine {
    /// Name shown in messages (`mpi`).
    fn name(&self) -> &'static str;

    /// Starts `plan`'s processes on this node — this program with `args` (without the program
    /// name) once per device — waits for all of them and returns the exit code for this
    /// process: 0 when every rank succeeded. Called only when no cluster environment started
    /// the ranks ([`Plan::launcher`]).
    fn launch(&self, plan: &Plan, args: &[String]) -> anyhow::Result<i32>;

    /// Joins this process to its run (`plan.world_size` ranks); the world must agree with the
    /// plan's ranks. A collective that waits longer than `timeout` for the other ranks ends
    /// the run.
    fn join(&self, plan: &Plan, timeout: Duration) -> anyhow::Result<Rc<dyn Collective>>;

    /// The exit status of a rank whose run stopped, every rank together, on one error that
    /// rank 0 reports, and that calls for status `code`. By default `code`; an engine whose
    /// [`launch`](Self::launch) started the ranks may carry `code` to it another way and
    /// return 0, so that its process manager adds no failure report of its own to the one
    /// message.
    fn stop_together(&self, plan: &Plan, code: u8) -> u8 {
        let _ = plan;
        code
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_local_store_gets_what_another_thread_puts_later() {
        let store = Arc::new(LocalKeyValueStore::default());
        let putter = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                store.put("k", &[0, 255]).unwrap();
            })
        };
        assert_eq!(store.try_get("k").unwrap(), None);
        let got = store.get("k", Duration::from_secs(10)).unwrap();
        assert_eq!(got, Some(vec![0, 255]));
        putter.join().unwrap();
        store.put("k", b"new").unwrap();
        assert_eq!(store.try_get("k").unwrap(), Some(b"new".to_vec()));
        let start = Instant::now();
        assert_eq!(
            store.get("absent", Duration::from_millis(20)).unwrap(),
            None
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn a_one_process_run_has_one_store() {
        let first = SingleProcess.key_value_store().unwrap();
        first.put("single/one", b"1").unwrap();
        let again = SingleProcess.key_value_store().unwrap();
        assert_eq!(again.try_get("single/one").unwrap(), Some(b"1".to_vec()));
    }
}
