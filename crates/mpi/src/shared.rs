//! Collectives through memory the ranks of one host share: the sums and gathers of large
//! buffers when every rank of the run is on this host.
//!
//! OpenMPI moves a large message between processes of one host either with a single copy
//! through the kernel (CMA, `process_vm_readv`, its default) or in fragments through shared
//! memory; on the virtual machines ember is measured on, its all-reduce of 17 MB takes 2–4 ms,
//! while one process sums two such arrays in under a millisecond. Here the ranks share an
//! MPI-3 window of one slot per rank and a result slot, and move a buffer through it a piece
//! at a time, two barriers per piece:
//!
//! - all-reduce (sum or mean): each rank copies a piece of its buffer into its slot, sums its
//!   share of every slot's piece in rank order into its buffer (dividing it there for a mean)
//!   and the result slot, and copies the other ranks' shares of the result back;
//! - reduce-scatter (sum): each rank copies a piece of every rank's part into its slot, and
//!   each sums its own part's piece of every slot in rank order into its output;
//! - all-gather: each rank copies a piece of its bytes into its slot, and each copies every
//!   slot's piece into its output.
//!
//! Every element is summed in rank order, `((x₀ + x₁) + x₂) + …`, by exactly one rank, and
//! every rank that needs it copies that one result: the ranks end bitwise equal, as with MPI's
//! own collectives.

use std::ffi::c_void;
use std::ops::Range;

use ember_plan::FlagError;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// Bytes of one rank's slot: the piece of a buffer summed between two barriers.
const SLOT_BYTES: usize = 1 << 20;

/// Buffers of at least this many bytes go through the window; smaller ones through MPI's
/// collectives, whose one message beats two barriers.
pub(crate) const MIN_BYTES: usize = 256 << 10;

/// The environment variable that turns the shared window off (`0`), for comparisons and for
/// hosts whose shared memory misbehaves.
const SWITCH: &str = "EMBER_MPI_SHARED_MEMORY";

/// A window of `ranks + 1` slots every rank of this host maps: one per rank for its pieces,
/// and the result of an all-reduce.
pub(crate) struct SharedWindow {
    node: SimpleCommunicator,
    win: ffi::MPI_Win,
    /// Slot 0's first byte; slot `r` starts `r · SLOT_BYTES` later, the result slot last.
    base: *mut u8,
    rank: usize,
    ranks: usize,
}

impl SharedWindow {
    /// The window over `world`'s ranks, or `None` when they are not all on this host, there
    /// is only one, `wanted` ([`wanted`]) is false on any rank, or a rank could not map the
    /// window. Every rank of `world` calls this at the same point.
    pub(crate) fn new(world: &SimpleCommunicator, wanted: bool) -> Option<Self> {
        let node = world.split_shared(world.rank());
        let whole_run = node.size() == world.size() && world.size() > 1;
        // The window is made together (MPI_Win_allocate_shared is collective) or not at all.
        if !every_rank(world, wanted && whole_run) {
            return None;
        }
        let made = Self::allocate(node);
        // Either every rank sums through the window or none does.
        match (every_rank(world, made.is_some()), made) {
            (true, made) => made,
            (false, Some(shared)) => {
                tracing::warn!(
                    target: "ember",
                    "a rank could not map MPI's shared window; large sums and gathers go through MPI's own collectives"
                );
                // Another rank has no window to free it with (MPI_Win_free is collective).
                std::mem::forget(shared);
                None
            }
            (false, None) => None,
        }
    }

    /// Maps the window on `node`'s ranks (rank 0 holds the memory), or `None` if MPI refused.
    fn allocate(node: SimpleCommunicator) -> Option<Self> {
        let (rank, ranks) = (node.rank() as usize, node.size() as usize);
        let bytes = if rank == 0 {
            (ranks + 1) * SLOT_BYTES
        } else {
            0
        };
        let mut base: *mut u8 = std::ptr::null_mut();
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        // SAFETY: live communicator and handles; `base` and `win` are written by MPI. Errors
        // return (not abort) on this communicator so a refusal falls back to MPI_Allreduce.
        let ok = unsafe {
            ffi::MPI_Comm_set_errhandler(node.as_raw(), ffi::RSMPI_ERRORS_RETURN) == 0
                && ffi::MPI_Win_allocate_shared(
                    bytes as ffi::MPI_Aint,
                    1,
                    ffi::RSMPI_INFO_NULL,
                    node.as_raw(),
                    (&raw mut base).cast::<c_void>(),
                    &mut win,
                ) == 0
        };
        if !ok {
            return None;
        }
        let (mut size, mut unit) = (0 as ffi::MPI_Aint, 0);
        // SAFETY: `win` is the window just made; rank 0's segment is every slot. The passive
        // epoch lasts the window's life: MPI_Win_sync orders this rank's accesses in it.
        let ok = unsafe {
            ffi::MPI_Win_shared_query(
                win,
                0,
                &mut size,
                &mut unit,
                (&raw mut base).cast::<c_void>(),
            ) == 0
                && ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as i32, win) == 0
        };
        (ok && size as usize == (ranks + 1) * SLOT_BYTES).then_some(Self {
            node,
            win,
            base,
            rank,
            ranks,
        })
    }

    /// Replaces `buf` on every rank with the element-wise sum of every rank's `buf` (the same
    /// length on every rank), divided by the number of ranks when `mean` is set.
    pub(crate) fn sum<T: Summand>(&self, buf: &mut [T], mean: bool) {
        let per_slot = SLOT_BYTES / size_of::<T>();
        for piece in buf.chunks_mut(per_slot) {
            let len = piece.len();
            let (lo, hi) = share(len, self.rank, self.ranks);
            // SAFETY (every slot below): between two barriers a rank writes only its own slot,
            // then only its share of the result slot, and reads what the barrier before
            // finished writing. Each slice lives within one phase: none is held across a
            // barrier, where other ranks change the memory.
            unsafe { self.slot_mut::<T>(self.rank, 0..len) }.copy_from_slice(piece);
            self.fenced_barrier();
            unsafe { self.sum_share(&mut piece[lo..hi], lo..hi, mean) };
            self.fenced_barrier();
            piece[..lo].copy_from_slice(unsafe { self.slot::<T>(self.ranks, 0..lo) });
            piece[hi..].copy_from_slice(unsafe { self.slot::<T>(self.ranks, hi..len) });
        }
        // No barrier after the last piece: a rank's next writes to its own slot come after
        // every read of it (before the second barrier), and its next writes to the result
        // after the next call's first barrier, which every rank reaches after its last read.
    }

    /// Sums every rank's `buf` (consecutive parts, rank r's `counts[r]` values long; the same
    /// `counts` on every rank) and leaves this rank's part of the sum in `out`.
    pub(crate) fn sum_scatter<T: Summand>(&self, buf: &[T], counts: &[usize], out: &mut [T]) {
        // Each step moves up to `per_part` values of every part; a slot holds one such piece
        // of each part, part r's at `r · per_part`.
        let per_part = SLOT_BYTES / size_of::<T>() / self.ranks;
        let starts = starts(counts);
        let own = self.rank * per_part;
        for step in 0..steps(counts, per_part) {
            for (r, (&start, &count)) in starts.iter().zip(counts).enumerate() {
                let part = piece(step, per_part, count);
                let at = r * per_part;
                // SAFETY (every slot below): a rank writes only its own slot before the first
                // barrier, and nothing between the two, where every rank reads; no slice is
                // held across a barrier.
                let slot = unsafe { self.slot_mut::<T>(self.rank, at..at + part.len()) };
                slot.copy_from_slice(&buf[start + part.start..start + part.end]);
            }
            self.fenced_barrier();
            let mine = piece(step, per_part, counts[self.rank]);
            let len = mine.len();
            let sums = &mut out[mine];
            add_in_rank_order(sums, self.ranks, |r| unsafe {
                self.slot::<T>(r, own..own + len)
            });
            self.fenced_barrier();
        }
    }

    /// Every rank's `bytes` (rank r's `counts[r]` long; the same `counts` on every rank),
    /// concatenated in rank order into `out`.
    pub(crate) fn gather(&self, bytes: &[u8], counts: &[usize], out: &mut [u8]) {
        let starts = starts(counts);
        let own = starts[self.rank]..starts[self.rank] + bytes.len();
        out[own].copy_from_slice(bytes);
        for step in 0..steps(counts, SLOT_BYTES) {
            let mine = piece(step, SLOT_BYTES, bytes.len());
            // SAFETY (every slot below): as in `sum_scatter`.
            unsafe { self.slot_mut::<u8>(self.rank, 0..mine.len()) }.copy_from_slice(&bytes[mine]);
            self.fenced_barrier();
            for (r, (&start, &count)) in starts.iter().zip(counts).enumerate() {
                let theirs = piece(step, SLOT_BYTES, count);
                if r != self.rank {
                    let slot = unsafe { self.slot::<u8>(r, 0..theirs.len()) };
                    out[start + theirs.start..start + theirs.end].copy_from_slice(slot);
                }
            }
            self.fenced_barrier();
        }
    }

    /// Sums values `share` of every rank's slot in rank order into `own` (divided by the
    /// number of ranks for a `mean`) and the result slot.
    ///
    /// # Safety
    /// Every rank has written its slot, and no other rank touches `share` of the result slot.
    unsafe fn sum_share<T: Summand>(&self, own: &mut [T], share: Range<usize>, mean: bool) {
        // SAFETY: the caller's.
        add_in_rank_order(own, self.ranks, |r| unsafe {
            self.slot::<T>(r, share.clone())
        });
        if mean {
            let ranks = T::count(self.ranks);
            own.iter_mut().for_each(|x| *x = *x / ranks);
        }
        unsafe { self.slot_mut::<T>(self.ranks, share) }.copy_from_slice(own);
    }

    /// Values `range` of slot `r` (`ranks` is the result slot), to read.
    ///
    /// # Safety
    /// No rank may write them while the slice lives.
    unsafe fn slot<T>(&self, r: usize, range: Range<usize>) -> &[T] {
        // SAFETY: as `slot_mut`'s, shared.
        unsafe { self.slot_mut(r, range) }
    }

    /// Values `range` of slot `r` (`ranks` is the result slot), to write.
    ///
    /// # Safety
    /// No other rank may read or write them while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot_mut<T>(&self, r: usize, range: Range<usize>) -> &mut [T] {
        assert!(r <= self.ranks && range.start <= range.end);
        assert!(range.end * size_of::<T>() <= SLOT_BYTES);
        // SAFETY: the values lie within the window (`ranks + 1` slots) and are aligned for T
        // (page-aligned base, slots a multiple of T's size apart); the caller keeps them unshared.
        unsafe {
            let first = self.base.add(r * SLOT_BYTES).cast::<T>().add(range.start);
            std::slice::from_raw_parts_mut(first, range.len())
        }
    }

    /// Waits for every rank of the host, with the window's memory ordered on both sides.
    fn fenced_barrier(&self) {
        // SAFETY: the window is live and in its passive epoch.
        unsafe { ffi::MPI_Win_sync(self.win) };
        self.node.barrier();
        unsafe { ffi::MPI_Win_sync(self.win) };
    }
}

impl Drop for SharedWindow {
    /// Frees the window (with every rank of the host, as the run ends).
    fn drop(&mut self) {
        // SAFETY: the window is live; every rank drops its collective at the end of the run.
        unsafe {
            ffi::MPI_Win_unlock_all(self.win);
            ffi::MPI_Win_free(&mut self.win);
        }
    }
}

/// `sums` set to every rank's `values(r)` added in rank order, `((v₀ + v₁) + v₂) + …` (there
/// are at least two ranks).
fn add_in_rank_order<'a, T: Summand + 'a>(
    sums: &mut [T],
    ranks: usize,
    values: impl Fn(usize) -> &'a [T],
) {
    let pairs = sums.iter_mut().zip(values(0).iter().zip(values(1)));
    pairs.for_each(|(sum, (&a, &b))| *sum = a + b);
    for r in 2..ranks {
        sums.iter_mut()
            .zip(values(r))
            .for_each(|(sum, &x)| *sum = *sum + x);
    }
}

/// Where each of the consecutive parts of `counts` values starts.
fn starts(counts: &[usize]) -> Vec<usize> {
    let ends = counts.iter().scan(0, |end, &c| {
        *end += c;
        Some(*end)
    });
    std::iter::once(0).chain(ends).take(counts.len()).collect()
}

/// Steps that move the longest of `counts` parts in pieces of `per_step`.
fn steps(counts: &[usize], per_step: usize) -> usize {
    counts.iter().max().map_or(0, |&c| c.div_ceil(per_step))
}

/// The values of a part of `count` that step `step` moves, pieces of `per_step` (empty once
/// the part is done).
fn piece(step: usize, per_step: usize, count: usize) -> Range<usize> {
    (step * per_step).min(count)..((step + 1) * per_step).min(count)
}

/// Whether this process asks for the shared window: [`SWITCH`] unset or `1` (`0` turns it off).
pub(crate) fn wanted() -> Result<bool, FlagError> {
    switch(std::env::var(SWITCH).ok().as_deref())
}

/// [`SWITCH`]'s value read as [`wanted`] reads it.
fn switch(value: Option<&str>) -> Result<bool, FlagError> {
    match value {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(FlagError::new(
            SWITCH,
            other,
            "0 turns the shared memory window off; 1 (or leaving it unset) keeps it on",
        )),
    }
}

/// Whether `yes` holds on every rank of `world`.
fn every_rank(world: &SimpleCommunicator, yes: bool) -> bool {
    let mut all = 0i32;
    world.all_reduce_into(
        &i32::from(yes),
        &mut all,
        mpi::collective::SystemOperation::min(),
    );
    all == 1
}

/// The element types summed (and averaged) through the window.
pub(crate) trait Summand:
    Copy + std::ops::Add<Output = Self> + std::ops::Div<Output = Self>
{
    /// `n` in this type.
    fn count(n: usize) -> Self;
}
impl Summand for f32 {
    fn count(n: usize) -> Self {
        n as f32
    }
}
impl Summand for f64 {
    fn count(n: usize) -> Self {
        n as f64
    }
}

/// Rank `rank`'s share of `len` values among `ranks`: `lo..hi`, the shares in rank order.
fn share(len: usize, rank: usize, ranks: usize) -> (usize, usize) {
    let at = |r: usize| len * r / ranks;
    (at(rank), at(rank + 1))
}

#[cfg(test)]
mod tests {
    use super::{piece, share, starts, steps, switch};

    #[test]
    fn the_switch_takes_0_and_1_and_names_itself_otherwise() {
        assert_eq!(switch(None), Ok(true));
        assert_eq!(switch(Some("1")), Ok(true));
        assert_eq!(switch(Some("0")), Ok(false));
        let err = switch(Some("off")).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid EMBER_MPI_SHARED_MEMORY value `off`: 0 turns the shared memory window off; 1 (or leaving it unset) keeps it on"
        );
    }

    #[test]
    fn parts_move_in_pieces_until_the_longest_is_done() {
        assert_eq!(starts(&[3, 0, 5]), [0, 3, 3]);
        assert_eq!(steps(&[3, 0, 5], 2), 3);
        assert_eq!(steps(&[0, 0], 2), 0);
        let pieces: Vec<_> = (0..3).map(|step| piece(step, 2, 3)).collect();
        assert_eq!(pieces, [0..2, 2..3, 3..3]);
    }

    #[test]
    fn shares_cover_a_piece_in_rank_order() {
        for (len, ranks) in [(0, 2), (1, 2), (7, 3), (262_144, 2), (10, 4)] {
            let mut next = 0;
            for rank in 0..ranks {
                let (lo, hi) = share(len, rank, ranks);
                assert_eq!(lo, next, "{len} over {ranks}");
                assert!(hi >= lo);
                next = hi;
            }
            assert_eq!(next, len);
        }
    }
}
