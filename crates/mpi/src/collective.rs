//! [`Collective`] over MPI's world communicator, with a watchdog that ends a stuck run.

use std::cell::OnceCell;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ember_plan::Plan;
use ember_plan::collective::{Collective, KeyValueStore, ReduceOp};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::key_value::MpiKeyValueStore;
use crate::shared::{self, SharedWindow, Summand};

/// The collective operation in progress and when it started.
type InFlight = Arc<Mutex<Option<(&'static str, Instant)>>>;

/// MPI's world communicator as a [`Collective`]. Dropping it finalises MPI.
pub struct MpiCollective {
    world: SimpleCommunicator,
    in_flight: InFlight,
    /// The thread support MPI gave this process.
    threading: mpi::Threading,
    /// The key-value store, once the ranks asked for it.
    key_value: OnceCell<Arc<MpiKeyValueStore>>,
    /// The shared window large sums and gathers go through when every rank is on this host.
    shared: Option<SharedWindow>,
    // Declared last: finalises MPI after the communicator is gone.
    _universe: Universe,
}

impl MpiCollective {
    /// Initialises MPI and checks that its world is the plan's.
    pub fn join(plan: &Plan, timeout: Duration) -> anyhow::Result<Self> {
        let wanted = shared::wanted()?;
        // Multiple, for the key-value store: any thread of a runtime may use it. The Trainer's
        // collectives stay on the main thread.
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .context("MPI is already initialised in this process")?;
        let world = universe.world();
        let (size, rank) = (world.size() as usize, world.rank() as usize);
        if size != plan.world_size || rank != plan.global_rank {
            bail!(
                "the plan makes this process rank {} of {} ({} environment), but MPI sees rank {rank} of {size}: \
                 ember's MPI engine needs ranks started by mpirun, srun (PMIx) or ember's own launcher \
                 (--trainer.devices=N with no cluster environment); processes started one by one \
                 (torchrun, hand-set LOCAL_RANK) cannot form an MPI world",
                plan.global_rank,
                plan.world_size,
                plan.cluster_environment
            );
        }
        let in_flight: InFlight = Arc::default();
        spawn_watchdog(Arc::clone(&in_flight), rank, timeout);
        let shared = timed(&in_flight, "shared window", || {
            SharedWindow::new(&world, wanted)
        });
        Ok(Self {
            world,
            in_flight,
            threading,
            key_value: OnceCell::new(),
            shared,
            _universe: universe,
        })
    }

    /// Whether sums and gathers of large buffers go through memory the ranks share (every rank
    /// is on this host, and `EMBER_MPI_SHARED_MEMORY` is not `0`) rather than through MPI's
    /// collectives.
    pub fn uses_shared_memory(&self) -> bool {
        self.shared.is_some()
    }

    /// All-reduces `buf` in place: a large sum through the shared window when there is one,
    /// else `MPI_Allreduce` with `MPI_IN_PLACE` (no send buffer, no copy of `buf`).
    fn all_reduce<T: Equivalence + Summand>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        if let Some(shared) = &self.shared
            && op == ReduceOp::Sum
            && size_of_val(buf) >= shared::MIN_BYTES
        {
            self.timed("all_reduce", || shared.sum(buf, false));
            return Ok(());
        }
        let count = i32::try_from(buf.len()).context("all_reduce takes at most 2^31 elements")?;
        let code = self.timed("all_reduce", || {
            // SAFETY: `buf` holds `count` elements of T's MPI datatype and is both the input and
            // the output (MPI_IN_PLACE); the communicator and operation are live rsmpi handles.
            unsafe {
                mpi::ffi::MPI_Allreduce(
                    ember_mpi_in_place(),
                    buf.as_mut_ptr().cast(),
                    count,
                    T::equivalent_datatype().as_raw(),
                    operation(op).as_raw(),
                    self.world.as_raw(),
                )
            }
        });
        anyhow::ensure!(code == 0, "MPI_Allreduce failed with code {code}");
        Ok(())
    }

    /// Replaces `buf` with its mean over the ranks: divided where the shared window copies
    /// a large sum out, else summed by [`all_reduce`](Self::all_reduce) and divided after.
    fn all_reduce_mean<T: Equivalence + Summand>(&self, buf: &mut [T]) -> anyhow::Result<()> {
        if let Some(shared) = &self.shared
            && size_of_val(buf) >= shared::MIN_BYTES
        {
            self.timed("all_reduce", || shared.sum(buf, true));
            return Ok(());
        }
        self.all_reduce(buf, ReduceOp::Sum)?;
        let ranks = T::count(self.world.size() as usize);
        buf.iter_mut().for_each(|x| *x = *x / ranks);
        Ok(())
    }

    /// Reduce-scatters `buf` into `out`: a large sum through the shared window when there is
    /// one, else with `MPI_Reduce_scatter` (rsmpi wraps only the equal-parts variant).
    fn reduce_scatter<T: Equivalence + Summand>(
        &self,
        buf: &[T],
        counts: &[usize],
        out: &mut [T],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        let counts = counts
            .iter()
            .map(|&c| {
                i32::try_from(c).context("reduce_scatter takes at most 2^31 elements per rank")
            })
            .collect::<anyhow::Result<Vec<i32>>>()?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let own = counts.get(self.rank()).copied().unwrap_or(0) as usize;
        anyhow::ensure!(
            counts.len() == self.world_size() && total == buf.len() && own == out.len(),
            "reduce_scatter: parts {counts:?} for {} ranks, {} elements in, {} out",
            self.world_size(),
            buf.len(),
            out.len()
        );
        if let Some(shared) = &self.shared
            && op == ReduceOp::Sum
            && size_of_val(buf) >= shared::MIN_BYTES
        {
            let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
            self.timed("reduce_scatter", || shared.sum_scatter(buf, &counts, out));
            return Ok(());
        }
        let code = self.timed("reduce_scatter", || {
            // SAFETY: `buf` holds the sum of `counts` elements and `out` this rank's count, both
            // of T's MPI datatype; the communicator and operation are live rsmpi handles.
            unsafe {
                mpi::ffi::MPI_Reduce_scatter(
                    buf.as_ptr().cast(),
                    out.as_mut_ptr().cast(),
                    counts.as_ptr(),
                    T::equivalent_datatype().as_raw(),
                    operation(op).as_raw(),
                    self.world.as_raw(),
                )
            }
        });
        anyhow::ensure!(code == 0, "MPI_Reduce_scatter failed with code {code}");
        Ok(())
    }

    /// Runs one collective under the watchdog.
    fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> T) -> T {
        timed(&self.in_flight, op, f)
    }
}

/// Runs collective `op` (`f`) under the watchdog that reads `in_flight`.
fn timed<T>(in_flight: &InFlight, op: &'static str, f: impl FnOnce() -> T) -> T {
    *in_flight.lock().unwrap_or_else(|e| e.into_inner()) = Some((op, Instant::now()));
    let out = f();
    *in_flight.lock().unwrap_or_else(|e| e.into_inner()) = None;
    out
}

unsafe extern "C" {
    /// The MPI library's `MPI_IN_PLACE` (csrc/in_place.c: a macro rsmpi does not export).
    safe fn ember_mpi_in_place() -> *mut std::ffi::c_void;
}

/// Ends the run when a collective has waited longer than `timeout`.
fn spawn_watchdog(in_flight: InFlight, rank: usize, timeout: Duration) {
    let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    std::thread::Builder::new()
        .name("ember-mpi-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                let stuck = *in_flight.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((op, since)) = stuck
                    && since.elapsed() > timeout
                {
                    eprintln!(
                        "error: rank {rank}: collective {op} waited {:.1} s for the other ranks \
                         (--trainer.ddp_timeout={} s); ending the run",
                        since.elapsed().as_secs_f64(),
                        timeout.as_secs_f64()
                    );
                    // SAFETY: MPI_Abort may be called from any thread once MPI is initialised;
                    // it ends every process of the world and does not return.
                    unsafe {
                        mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 1);
                    }
                    std::process::exit(1);
                }
            }
        })
        .expect("the watchdog thread starts");
}

/// Where each of the consecutive parts of `counts` elements starts.
fn offsets(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0i32, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

fn operation(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
        ReduceOp::Min => SystemOperation::min(),
    }
}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn world_size(&self) -> usize {
        self.world.size() as usize
    }

    fn barrier(&self) -> anyhow::Result<()> {
        self.timed("barrier", || self.world.barrier());
        Ok(())
    }

    fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> anyhow::Result<()> {
        self.all_reduce(buf, op)
    }

    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp) -> anyhow::Result<()> {
        self.all_reduce(buf, op)
    }

    fn all_reduce_mean_f32(&self, buf: &mut [f32]) -> anyhow::Result<()> {
        self.all_reduce_mean(buf)
    }

    fn all_reduce_mean_f64(&self, buf: &mut [f64]) -> anyhow::Result<()> {
        self.all_reduce_mean(buf)
    }

    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> anyhow::Result<()> {
        let root = self.world.process_at_rank(root as i32);
        let mut len = buf.len() as u64;
        self.timed("broadcast", || root.broadcast_into(&mut len));
        buf.resize(usize::try_from(len)?, 0);
        self.timed("broadcast", || root.broadcast_into(&mut buf[..]));
        Ok(())
    }

    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        let world = self.world_size();
        let mut counts = vec![0i32; world];
        let own = i32::try_from(bytes.len()).context("all_gather takes at most 2 GiB per rank")?;
        self.timed("all_gather", || {
            self.world.all_gather_into(&own, &mut counts[..])
        });
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        if total == 0 {
            // OpenMPI refuses a gather of nothing at all (MPI_ERR_ARG): every part is empty.
            return Ok(vec![Vec::new(); world]);
        }
        let displs = offsets(&counts);
        let mut all = vec![0u8; total];
        {
            let mut partition = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.timed("all_gather", || {
                self.world.all_gather_varcount_into(bytes, &mut partition)
            });
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    fn reduce_scatter_f32(
        &self,
        buf: &[f32],
        counts: &[usize],
        out: &mut [f32],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        self.reduce_scatter(buf, counts, out, op)
    }

    fn reduce_scatter_f64(
        &self,
        buf: &[f64],
        counts: &[usize],
        out: &mut [f64],
        op: ReduceOp,
    ) -> anyhow::Result<()> {
        self.reduce_scatter(buf, counts, out, op)
    }

    fn all_gather_into(
        &self,
        bytes: &[u8],
        counts: &[usize],
        out: &mut [u8],
    ) -> anyhow::Result<()> {
        let counts = counts
            .iter()
            .map(|&c| i32::try_from(c).context("all_gather takes at most 2 GiB per rank"))
            .collect::<anyhow::Result<Vec<i32>>>()?;
        let displs = offsets(&counts);
        let own = counts.get(self.rank()).copied().unwrap_or(-1);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        anyhow::ensure!(
            counts.len() == self.world_size() && own as usize == bytes.len() && total == out.len(),
            "all_gather_into: parts {counts:?} for {} ranks; this rank has {} bytes, {} out",
            self.world_size(),
            bytes.len(),
            out.len()
        );
        if let Some(shared) = &self.shared
            && out.len() >= shared::MIN_BYTES
        {
            let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
            self.timed("all_gather", || shared.gather(bytes, &counts, out));
            return Ok(());
        }
        let mut partition = PartitionMut::new(out, &counts[..], &displs[..]);
        self.timed("all_gather", || {
            self.world.all_gather_varcount_into(bytes, &mut partition)
        });
        Ok(())
    }

    fn key_value_store(&self) -> anyhow::Result<Arc<dyn KeyValueStore>> {
        if let Some(store) = self.key_value.get() {
            return Ok(store.clone());
        }
        if self.threading != mpi::Threading::Multiple {
            bail!(
                "a key-value store needs MPI_THREAD_MULTIPLE (its values are asked for from any \
                 thread), and this MPI gave {:?}: use an OpenMPI built with thread support",
                self.threading
            );
        }
        let store = self.timed("key_value_store", || MpiKeyValueStore::new(&self.world))?;
        Ok(self.key_value.get_or_init(|| store).clone())
    }

    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}

impl Drop for MpiCollective {
    /// Closes the key-value store, if the ranks made one, and frees the shared window before
    /// MPI is finalised.
    fn drop(&mut self) {
        if let Some(store) = self.key_value.get() {
            self.timed("key_value_store close", || store.close());
        }
        let shared = self.shared.take();
        self.timed("shared window free", || drop(shared));
    }
}
