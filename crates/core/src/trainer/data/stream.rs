//! The order a loader over [`Shards`](super::Shards) reads records in: each epoch the shards
//! in a seeded order, each rank an equal run of records of that sequence (so it reads its own
//! shards), and, when shuffled, each rank's run through a shuffle buffer. The order is made
//! lazily from the shards' record counts alone, so a pass holds the buffer's indices and
//! nothing in proportion to the corpus, and a pass resumed at batch `k` finds the same order
//! by replaying the indices (no record is read to do it).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::epoch_permutation;
use super::source::mix64;
use crate::plugins::shard::Shard;

/// Records a shuffled loader over shards holds in its buffer unless told otherwise.
pub(crate) const DEFAULT_BUFFER: usize = 1024;

/// A loader's streaming settings: where each shard starts, and the shuffle buffer's size.
#[derive(Debug, Clone)]
pub(crate) struct StreamPlan {
    /// The corpus index of each shard's first record, and the corpus's length last.
    pub(crate) starts: Arc<[usize]>,
    /// Records in the shuffle buffer (used when the loader shuffles).
    pub(crate) buffer: usize,
}

impl StreamPlan {
    /// Records each rank of `shard.world` gets per epoch: an equal share (the epoch's last
    /// `len mod world` records are left out, so every rank takes as many steps).
    pub(crate) fn items(&self, shard: Shard) -> usize {
        self.starts.last().copied().unwrap_or(0) / shard.world
    }

    /// `shard`'s records of `epoch`, in the order they are batched.
    pub(crate) fn order(&self, shuffle: bool, seed: u64, epoch: u64, shard: Shard) -> StreamOrder {
        let count = self.starts.len() - 1;
        let shards = match shuffle {
            true => epoch_permutation(count, seed, epoch),
            false => (0..count).collect(),
        };
        let share = self.items(shard);
        let rng = shuffle.then(|| {
            let z = seed
                ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ (shard.rank as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
            StdRng::seed_from_u64(mix64(z))
        });
        let mut order = StreamOrder {
            starts: Arc::clone(&self.starts),
            shards,
            slot: 0,
            next: 0,
            left: share,
            buffer: Vec::with_capacity(if shuffle { self.buffer.max(1) } else { 0 }),
            capacity: self.buffer.max(1),
            rng,
        };
        order.skip_records(shard.rank * share);
        order
    }
}

/// One rank's records of one epoch, in batching order ([`StreamPlan::order`]).
pub(crate) struct StreamOrder {
    starts: Arc<[usize]>,
    /// The epoch's shard order.
    shards: Vec<usize>,
    /// The slot of `shards` being read.
    slot: usize,
    /// The next record of that shard, counted from its start.
    next: usize,
    /// Records this rank has still to read.
    left: usize,
    buffer: Vec<usize>,
    capacity: usize,
    /// The buffer's generator; `None` reads in order.
    rng: Option<StdRng>,
}

impl StreamOrder {
    /// The records in the current shard.
    fn shard_len(&self) -> usize {
        let s = self.shards[self.slot];
        self.starts[s + 1] - self.starts[s]
    }

    /// Moves the read position `n` records on, without reading them.
    fn skip_records(&mut self, mut n: usize) {
        while self.slot < self.shards.len() {
            let rest = self.shard_len() - self.next;
            if n < rest {
                self.next += n;
                return;
            }
            n -= rest;
            (self.slot, self.next) = (self.slot + 1, 0);
        }
    }

    /// The corpus index of the next record of this rank's run, in read order.
    fn read(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        while self.next == self.shard_len() {
            (self.slot, self.next) = (self.slot + 1, 0);
        }
        self.left -= 1;
        self.next += 1;
        Some(self.starts[self.shards[self.slot]] + self.next - 1)
    }
}

impl Iterator for StreamOrder {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.rng.is_none() {
            return self.read();
        }
        while self.buffer.len() < self.capacity {
            let Some(record) = self.read() else { break };
            self.buffer.push(record);
        }
        let (rng, len) = (self.rng.as_mut()?, self.buffer.len());
        if len == 0 {
            return None;
        }
        let at = rng.random_range(0..len);
        Some(self.buffer.swap_remove(at))
    }
}
