//! `ddp`'s host path: every gradient comes back as the mean over the ranks in its own dtype,
//! large ones reduced in their own buffers, the rest in buckets; every rank starts from rank
//! 0's weights; the replica check finds a rank that drifted.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use burn::module::ParamId;
use burn::optim::GradientsParams;
use burn::tensor::{DType, TensorData};

use super::{ALONE_BYTES, Ddp};
use crate::checkpoint_io::LocalCheckpointIO;
use crate::collective::{Collective, ReduceOp};
use crate::options::ClipAlgorithm;
use crate::plan::Plan;
use crate::plugins::access::Gradients;
use crate::plugins::precision::TruePrecision;
use crate::plugins::strategy::{Strategy, StrategyParts};
use crate::plugins::weights::{ParamInfo, Weights};
use ember_plan::precision::Precision;

/// One of two ranks: its partner's gradients are all ones (each all-reduce's length is
/// recorded); as rank 1 it receives `root` from rank 0's broadcast and `rank_0` beside its own
/// bytes in an all-gather (rank 0 sees its own bytes twice).
#[derive(Default)]
struct Partner {
    rank: usize,
    root: Vec<u8>,
    rank_0: Vec<u8>,
    lengths: RefCell<Vec<(&'static str, usize)>>,
}

impl Collective for Partner {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        2
    }
    fn barrier(&self) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> anyhow::Result<()> {
        assert!(matches!(op, ReduceOp::Sum));
        self.lengths.borrow_mut().push(("f32", buf.len()));
        buf.iter_mut().for_each(|x| *x += 1.0);
        Ok(())
    }
    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp) -> anyhow::Result<()> {
        assert!(matches!(op, ReduceOp::Sum));
        self.lengths.borrow_mut().push(("f64", buf.len()));
        buf.iter_mut().for_each(|x| *x += 1.0);
        Ok(())
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> anyhow::Result<()> {
        assert_eq!(root, 0);
        if self.rank != root {
            buf.clone_from(&self.root);
        }
        Ok(())
    }
    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        let first = match self.rank {
            0 => bytes.to_vec(),
            _ => self.rank_0.clone(),
        };
        Ok(vec![first, bytes.to_vec()])
    }
    fn abort(&self, code: i32) -> ! {
        panic!("abort({code})")
    }
}

/// Gradients held as host data: what `ddp`'s host path takes and puts back.
struct HostGradients(Vec<(ParamId, TensorData)>);

impl Gradients for HostGradients {
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)> {
        std::mem::take(&mut self.0)
    }
    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>) {
        self.0 = grads;
    }
    fn scale(&mut self, _: f64) {
        unreachable!("the host path does not scale")
    }
    fn global_norm(&self) -> Option<f64> {
        unreachable!("the host path takes no norm")
    }
    fn all_finite(&self) -> bool {
        unreachable!("the host path checks nothing")
    }
    fn clip(&mut self, _: ClipAlgorithm, _: f64) {
        unreachable!("the host path does not clip")
    }
    fn params(&mut self) -> &mut GradientsParams {
        unreachable!("the host path needs no burn container")
    }
}

fn ddp_over(collective: Rc<Partner>) -> Ddp {
    Ddp::new(StrategyParts {
        plan: Plan::local("cpu", Precision::F32True),
        collective,
        precision: Box::new(TruePrecision(Precision::F32True)),
        checkpoint_io: Arc::new(LocalCheckpointIO),
        bucket_cap_bytes: 4 << 20,
        sync_batchnorm: false,
        device_collective: None,
    })
}

/// `n` values counting up from `first` in steps of 0.25, in `dtype`.
fn ramp(first: f32, n: usize, dtype: DType) -> TensorData {
    let values: Vec<f32> = (0..n).map(|i| first + 0.25 * i as f32).collect();
    TensorData::new(values, [n]).convert_dtype(dtype)
}

#[test]
fn every_gradient_comes_back_as_the_mean_in_its_own_dtype() {
    let large = ALONE_BYTES / size_of::<f32>();
    let given = [
        ramp(-3.0, 17, DType::F32),
        ramp(0.5, large, DType::F32),
        ramp(1.0, 5, DType::F64),
        ramp(2.0, 9, DType::BF16),
        ramp(-1.0, large + 3, DType::F32),
        ramp(4.0, 2, DType::F32),
    ];
    let mut grads = HostGradients(given.iter().map(|d| (ParamId::new(), d.clone())).collect());
    let ids: Vec<ParamId> = grads.0.iter().map(|(id, _)| *id).collect();
    let collective = Rc::new(Partner::default());
    ddp_over(Rc::clone(&collective))
        .average_gradients(&mut grads)
        .unwrap();

    for ((id, got), (want_id, given)) in grads.0.iter().zip(ids.iter().zip(&given)) {
        assert_eq!(id, want_id, "the gradients keep their order and ids");
        assert_eq!(got.dtype, given.dtype);
        let want: Vec<f64> = given.iter::<f64>().map(|g| (g + 1.0) / 2.0).collect();
        let want = TensorData::new(want, given.shape.clone()).convert_dtype(given.dtype);
        assert_eq!(got.as_bytes(), want.as_bytes(), "{:?}", given.dtype);
    }
    // The two large f32 gradients in their own all-reduces; the small f32 and bf16 ones in one
    // bucket; the f64 one in f64.
    assert_eq!(
        *collective.lengths.borrow(),
        [
            ("f32", large),
            ("f32", large + 3),
            ("f32", 17 + 9 + 2),
            ("f64", 5)
        ]
    );
}

/// Weights held as host data.
struct HostWeights(Vec<(ParamId, TensorData)>);

impl Weights for HostWeights {
    fn to_host(&self) -> Vec<(ParamId, TensorData)> {
        self.0.clone()
    }
    fn buffers_to_host(&self) -> Vec<(ParamId, TensorData)> {
        Vec::new()
    }
    fn to_host_where(&self, keep: &mut dyn FnMut(ParamId) -> bool) -> Vec<(ParamId, TensorData)> {
        self.0.iter().filter(|(id, _)| keep(*id)).cloned().collect()
    }
    fn trainable(&self) -> Vec<ParamInfo> {
        unreachable!("setup and the replica check need no sizes")
    }
    fn load_host(&mut self, weights: Vec<(ParamId, TensorData)>) -> anyhow::Result<()> {
        self.0 = weights;
        Ok(())
    }
}

fn ddp_as_rank_one(root: Vec<u8>, rank_0: Vec<u8>) -> Ddp {
    ddp_over(Rc::new(Partner {
        rank: 1,
        root,
        rank_0,
        ..Partner::default()
    }))
}

#[test]
fn every_rank_starts_from_rank_0s_weights_in_their_own_dtypes() {
    let own = [ramp(1.0, 6, DType::F32), ramp(-2.0, 3, DType::F64)];
    let root = [ramp(7.0, 6, DType::F32), ramp(0.5, 3, DType::F64)];
    let root_bytes = root.iter().flat_map(|d| d.as_bytes().to_vec()).collect();
    let mut weights = HostWeights(own.iter().map(|d| (ParamId::new(), d.clone())).collect());
    let ids: Vec<ParamId> = weights.0.iter().map(|(id, _)| *id).collect();
    let mut ddp = ddp_as_rank_one(root_bytes, Vec::new());
    ddp.setup_weights(&mut weights).unwrap();
    for ((id, got), (want_id, want)) in weights.0.iter().zip(ids.iter().zip(&root)) {
        assert_eq!(
            (id, got.dtype, &got.shape),
            (want_id, want.dtype, &want.shape)
        );
        assert_eq!(got.as_bytes(), want.as_bytes());
    }
}

#[test]
fn a_model_of_another_size_on_rank_0_is_refused_before_anything_loads() {
    let own = ramp(1.0, 6, DType::F32);
    let mut weights = HostWeights(vec![(ParamId::new(), own.clone())]);
    let mut ddp = ddp_as_rank_one(vec![0; 20], Vec::new());
    let err = ddp.setup_weights(&mut weights).unwrap_err().to_string();
    assert!(
        err.contains("rank 1's model has 24 bytes of float parameters but rank 0's has 20"),
        "{err}"
    );
    assert_eq!(weights.0[0].1.as_bytes(), own.as_bytes());
}

#[test]
fn the_replica_check_names_a_rank_whose_weights_differ_in_one_bit() {
    let mine = ramp(1.0, 1000, DType::F32);
    let digest = |data: &TensorData| super::REPLICA_CRC.checksum(data.as_bytes()).to_le_bytes();
    let weights = HostWeights(vec![(ParamId::new(), mine.clone())]);
    let same = ddp_as_rank_one(Vec::new(), digest(&mine).to_vec());
    super::check_replicas(same.collective(), &weights, false).unwrap();

    let mut flipped = mine.clone();
    flipped.bytes[2000] ^= 1;
    let differs = ddp_as_rank_one(Vec::new(), digest(&flipped).to_vec());
    let err = super::check_replicas(differs.collective(), &weights, false).unwrap_err();
    assert!(err.to_string().contains("rank(s) [1] differ"), "{err}");
}
