//! One pass over a loader ([`Batches`]): its items made on the training thread, or ahead of
//! the step by worker threads that live as long as the loader ([`Pool`]). Batch `k` of a pass
//! goes to worker `k mod n` and is taken back from that worker, so the batches come in the
//! loader's order whatever the number of workers; at most `n × prefetch_factor` batches are in
//! flight.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;

use anyhow::{Context, anyhow};
use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;

use super::BatchScope;
use super::source::{DataSource, ItemKey};

/// The items at `indices`, made with `seed` and `epoch`, and what was said of each item that
/// could not be made and was left out (`skip`); without `skip`, such an item is an error naming
/// its index. A batch none of whose items could be made is an error either way.
fn make_items<I>(
    source: &dyn DataSource<I>,
    (seed, epoch): (u64, u64),
    indices: &[usize],
    skip: bool,
) -> anyhow::Result<(Vec<I>, Vec<String>)> {
    let mut items = Vec::with_capacity(indices.len());
    let mut skipped = Vec::new();
    for &index in indices {
        let key = ItemKey { seed, epoch, index };
        let made = catch_unwind(AssertUnwindSafe(|| source.get(key)))
            .unwrap_or_else(|panic| Err(anyhow!("panicked: {}", panic_message(&*panic))))
            .with_context(|| format!("making item {index}"));
        match made {
            Ok(item) => items.push(item),
            Err(e) if skip => skipped.push(format!("{e:#}")),
            Err(e) => return Err(e),
        }
    }
    if items.is_empty() && !skipped.is_empty() {
        anyhow::bail!(
            "no item of the batch could be made; the first: {}",
            skipped[0]
        );
    }
    Ok((items, skipped))
}

/// What a panic said, when it said it with a string.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    (panic.downcast_ref::<&str>().copied())
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A batch's items to make, for the pass numbered `pass`.
struct Job {
    pass: u64,
    seed: u64,
    epoch: u64,
    indices: Vec<usize>,
    skip: bool,
}

/// A worker's answer to a [`Job`].
struct Made<I> {
    pass: u64,
    items: anyhow::Result<(Vec<I>, Vec<String>)>,
}

/// One worker thread and its two queues.
struct Worker<I> {
    jobs: Option<Sender<Job>>,
    made: Receiver<Made<I>>,
    thread: Option<JoinHandle<()>>,
}

/// Worker threads making one loader's items. Dropping the pool closes their queues and joins
/// them (each finishes the item it is making).
pub(crate) struct Pool<I> {
    workers: Vec<Worker<I>>,
    /// The pass being served; a worker skips the queued jobs of any other.
    current: Arc<AtomicU64>,
}

impl<I: Send + 'static> Pool<I> {
    /// `count` threads (named after the loader `name`) making `source`'s items.
    pub(crate) fn start(
        source: &Arc<dyn DataSource<I>>,
        count: usize,
        name: &str,
    ) -> anyhow::Result<Self> {
        let current = Arc::new(AtomicU64::new(0));
        let workers = (0..count)
            .map(|k| {
                let (jobs, queue) = channel::<Job>();
                let (out, made) = channel();
                let (source, current) = (Arc::clone(source), Arc::clone(&current));
                let thread = std::thread::Builder::new()
                    .name(format!("ember-{name}-data-{k}"))
                    .spawn(move || {
                        for job in queue {
                            if job.pass != current.load(Ordering::Acquire) {
                                continue;
                            }
                            let (at, indices) = ((job.seed, job.epoch), &job.indices);
                            let items = make_items(&*source, at, indices, job.skip);
                            if out
                                .send(Made {
                                    pass: job.pass,
                                    items,
                                })
                                .is_err()
                            {
                                return;
                            }
                        }
                    })
                    .with_context(|| format!("starting data worker {k} of the {name} loader"))?;
                Ok(Worker {
                    jobs: Some(jobs),
                    made,
                    thread: Some(thread),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { workers, current })
    }
}

impl<I> Drop for Pool<I> {
    fn drop(&mut self) {
        self.current.fetch_add(1, Ordering::AcqRel);
        for worker in &mut self.workers {
            worker.jobs = None;
        }
        for worker in &mut self.workers {
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// One pass over a loader: its batches from `first` on, in order. Made by
/// [`Loader::pass`](super::Loader::pass).
pub struct Batches<'a, I> {
    pub(super) source: &'a dyn DataSource<I>,
    /// The loader's name, for errors.
    pub(super) name: &'a str,
    pub(super) pool: Option<MutexGuard<'a, Option<Pool<I>>>>,
    /// Batches in flight at most (workers × prefetch factor).
    pub(super) ahead: usize,
    pub(super) seed: u64,
    pub(super) epoch: u64,
    /// The index lists of this pass's batches, made as they are handed out.
    pub(super) batches: Box<dyn Iterator<Item = Vec<usize>> + Send>,
    /// Batches in this pass.
    pub(super) count: usize,
    /// The batch index (in the epoch) of `batches[0]`.
    pub(super) first: usize,
    pub(super) pass: u64,
    pub(super) submitted: usize,
    pub(super) taken: usize,
    /// Leave out items that cannot be made (counted, and warned of when the pass ends).
    pub(super) skip: bool,
    /// What was said of the items left out so far.
    pub(super) skipped: Vec<String>,
    /// Items in the batch handed out last.
    pub(super) last_len: usize,
}

impl<I> Batches<'_, I> {
    /// Items in the batch [`next_batch_scoped`](Self::next_batch_scoped) handed out last.
    pub(crate) fn last_len(&self) -> usize {
        self.last_len
    }

    /// Starts the pass: its first batches go to the workers.
    pub(super) fn started(mut self) -> Self {
        if let Some(pool) = self.pool() {
            self.pass = pool.current.fetch_add(1, Ordering::AcqRel) + 1;
        }
        self.submit_ahead();
        self
    }

    fn pool(&self) -> Option<&Pool<I>> {
        self.pool.as_ref().and_then(|guard| guard.as_ref())
    }

    /// Hands the workers every batch up to `ahead` past the next one to take.
    fn submit_ahead(&mut self) {
        let Some(pool) = self.pool.as_ref().and_then(|guard| guard.as_ref()) else {
            return;
        };
        let until = self.count.min(self.taken + self.ahead);
        let n = pool.workers.len();
        for k in self.submitted..until {
            let job = Job {
                pass: self.pass,
                seed: self.seed,
                epoch: self.epoch,
                indices: self.batches.next().unwrap_or_default(),
                skip: self.skip,
            };
            // A worker that is gone is reported when its batch is taken.
            let _ = pool.workers[k % n].jobs.as_ref().map(|jobs| jobs.send(job));
        }
        self.submitted = self.submitted.max(until);
    }

    /// The next batch's items, or `None` after the pass's last batch.
    fn next_items(&mut self) -> anyhow::Result<Option<Vec<I>>> {
        let k = self.taken;
        if k == self.count {
            return Ok(None);
        }
        self.taken += 1;
        self.submit_ahead();
        let batch_idx = self.first + k;
        let Some(pool) = self.pool() else {
            let at = (self.seed, self.epoch);
            let indices = self.batches.next().unwrap_or_default();
            let made = make_items(self.source, at, &indices, self.skip);
            let (items, skipped) = made.with_context(|| self.failed(batch_idx))?;
            self.skipped.extend(skipped);
            return Ok(Some(items));
        };
        let worker = k % pool.workers.len();
        loop {
            let made = pool.workers[worker].made.recv().map_err(|_| {
                anyhow!(
                    "data worker {worker} of the {} loader stopped without an answer",
                    self.name
                )
            })?;
            if made.pass == self.pass {
                let (items, skipped) = made.items.with_context(|| {
                    format!("{} (on data worker {worker})", self.failed(batch_idx))
                })?;
                self.skipped.extend(skipped);
                return Ok(Some(items));
            }
        }
    }

    /// How many items this pass has left out, and what was said of the first.
    pub fn skipped(&self) -> (usize, Option<&str>) {
        (self.skipped.len(), self.skipped.first().map(String::as_str))
    }

    fn failed(&self, batch_idx: usize) -> String {
        format!(
            "the {} loader could not make batch {batch_idx} of epoch {}",
            self.name, self.epoch
        )
    }

    /// The next batch as `(batch index in the epoch, batch)`, made by `batcher` on `device`
    /// on this thread; `None` after the pass's last batch.
    pub fn next_batch<B: Backend, O>(
        &mut self,
        batcher: &impl Batcher<B, I, O>,
        device: &B::Device,
    ) -> anyhow::Result<Option<(usize, O)>> {
        self.next_batch_scoped(batcher, device, |_, _| {})
    }

    /// [`next_batch`](Self::next_batch), telling `scope` of the batch around its making: the
    /// device and the batch's item count before, the device and `None` after (the Trainer
    /// passes its accelerator's [`BatchScope`]).
    pub(crate) fn next_batch_scoped<B: Backend, O>(
        &mut self,
        batcher: &impl Batcher<B, I, O>,
        device: &B::Device,
        scope: BatchScope<B::Device>,
    ) -> anyhow::Result<Option<(usize, O)>> {
        let Some(items) = self.next_items()? else {
            return Ok(None);
        };
        let batch_idx = self.first + self.taken - 1;
        self.last_len = items.len();
        scope(device, Some(items.len()));
        let made = catch_unwind(AssertUnwindSafe(|| batcher.batch(items, device)));
        scope(device, None);
        let batch = made.map_err(|panic| {
            anyhow!(
                "the {} loader's batcher panicked on batch {batch_idx} of epoch {}: {}",
                self.name,
                self.epoch,
                panic_message(&*panic)
            )
        })?;
        Ok(Some((batch_idx, batch)))
    }
}

impl<I> Drop for Batches<'_, I> {
    fn drop(&mut self) {
        if let Some(first) = self.skipped.first() {
            tracing::warn!(
                target: "ember",
                "the {} loader left out {} item(s) of epoch {} that could not be made; the first: {first}",
                self.name,
                self.skipped.len(),
                self.epoch
            );
        }
        // The workers skip what is still queued for this pass.
        if let Some(pool) = self.pool() {
            pool.current.fetch_add(1, Ordering::AcqRel);
        }
    }
}
