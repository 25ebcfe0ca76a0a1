//! A rank's share of the data: what a strategy's `shard` says each loader of a distributed run
//! batches.

/// One rank's share of every epoch, as torch's `DistributedSampler` deals it: the epoch's
/// order (the same on every rank) is padded by repeating its first items to a multiple of
/// `world`, and rank `r` takes the items at positions `r, r + world, r + 2·world, ...`. Every
/// rank gets the same number of items, so every rank runs the same number of batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This process's rank.
    pub rank: usize,
    /// Processes sharing the epoch.
    pub world: usize,
}

impl Shard {
    /// The whole epoch (one process).
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };

    /// Items this shard gets of an epoch of `len`.
    pub fn items(self, len: usize) -> usize {
        len.div_ceil(self.world)
    }

    /// This shard's items of an epoch visited in `order`.
    pub fn take(self, order: &[usize]) -> Vec<usize> {
        if self.world == 1 {
            return order.to_vec();
        }
        let padded = self.items(order.len()) * self.world;
        order
            .iter()
            .cycle()
            .take(padded)
            .skip(self.rank)
            .step_by(self.world)
            .copied()
            .collect()
    }
}
