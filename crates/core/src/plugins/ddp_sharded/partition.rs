//! Which rank owns which parameters under a sharded strategy.
//!
//! Parameters are dealt whole (burn's optimizers update whole tensors), largest first, each to
//! the rank with the fewest bytes so far (the lowest rank on a tie), as torch's
//! `ZeroRedundancyOptimizer` does. Every rank builds the same partition from its own model:
//! it depends only on the parameters' visit order and sizes. Ranks name parameters by their
//! place in visit order, never by burn's `ParamId` (random per process).

use std::collections::HashMap;

use burn::module::ParamId;

use crate::plugins::weights::ParamInfo;

/// The parameters that take gradients, each with the rank that owns it.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Every trainable parameter, in visit order.
    params: Vec<ParamInfo>,
    /// The owner of each, by place in `params`.
    owners: Vec<usize>,
    /// Place in visit order by this process's ids.
    places: HashMap<ParamId, usize>,
    /// Bytes owned by each rank.
    loads: Vec<usize>,
}

impl Partition {
    /// `params` (in visit order) dealt over `world` ranks, balanced by size.
    pub fn balanced(params: Vec<ParamInfo>, world: usize) -> Self {
        let world = world.max(1);
        let mut by_size: Vec<usize> = (0..params.len()).collect();
        by_size.sort_by(|&a, &b| params[b].bytes().cmp(&params[a].bytes()).then(a.cmp(&b)));
        let mut loads = vec![0; world];
        let mut owners = vec![0; params.len()];
        for place in by_size {
            let rank = (0..world)
                .min_by_key(|&r| (loads[r], r))
                .expect("at least one rank");
            owners[place] = rank;
            loads[rank] += params[place].bytes();
        }
        let places = params.iter().enumerate().map(|(i, p)| (p.id, i)).collect();
        Self {
            params,
            owners,
            places,
            loads,
        }
    }

    /// The trainable parameters, in visit order.
    pub fn params(&self) -> &[ParamInfo] {
        &self.params
    }

    /// The place in visit order of the parameter this process calls `id`.
    pub fn place(&self, id: ParamId) -> Option<usize> {
        self.places.get(&id).copied()
    }

    /// The rank that owns the parameter at `place`.
    pub fn owner(&self, place: usize) -> usize {
        self.owners[place]
    }

    /// Whether `rank` owns the parameter this process calls `id`.
    pub fn owns(&self, rank: usize, id: ParamId) -> bool {
        self.place(id).is_some_and(|p| self.owners[p] == rank)
    }

    /// Every place, ordered by owner and within an owner by visit order: the layout of the
    /// buffers the ranks exchange, where each rank's parameters are consecutive.
    pub fn owner_major(&self) -> Vec<usize> {
        let mut places: Vec<usize> = (0..self.params.len()).collect();
        places.sort_by_key(|&p| (self.owners[p], p));
        places
    }

    /// The bytes of parameters each rank owns.
    pub fn loads(&self) -> &[usize] {
        &self.loads
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::DType;

    use super::*;

    fn params(sizes: &[usize]) -> Vec<ParamInfo> {
        sizes
            .iter()
            .map(|&n| ParamInfo {
                id: ParamId::new(),
                shape: vec![n],
                dtype: DType::F32,
            })
            .collect()
    }

    #[test]
    fn largest_first_to_the_least_loaded_rank() {
        // An MLP: 64x256 (+256), 256x256 (+256), 256x10 (+10).
        let p = Partition::balanced(params(&[16384, 256, 65536, 256, 2560, 10]), 2);
        let owners: Vec<usize> = (0..6).map(|i| p.owner(i)).collect();
        assert_eq!(owners, [1, 1, 0, 1, 1, 1]);
        assert_eq!(p.loads(), [65536 * 4, (16384 + 256 + 256 + 2560 + 10) * 4]);
        assert_eq!(p.owner_major(), [2, 0, 1, 3, 4, 5]);
    }

    #[test]
    fn equal_sizes_alternate_and_one_rank_owns_everything() {
        let p = Partition::balanced(params(&[8, 8, 8, 8]), 2);
        let owners: Vec<usize> = (0..4).map(|i| p.owner(i)).collect();
        assert_eq!(owners, [0, 1, 0, 1]);
        let one = Partition::balanced(params(&[8, 3]), 1);
        assert!(one.params().iter().all(|q| one.owns(0, q.id)));
        assert_eq!(one.loads(), [44]);
    }

    #[test]
    fn ranks_agree_although_their_ids_differ() {
        let (a, b) = (params(&[5, 9, 2, 9]), params(&[5, 9, 2, 9]));
        let (pa, pb) = (Partition::balanced(a, 3), Partition::balanced(b, 3));
        assert_eq!(pa.owner_major(), pb.owner_major());
        assert_eq!(pa.place(pa.params()[3].id), Some(3));
        assert_eq!(pa.place(pb.params()[3].id), None);
    }
}
