//! `ddp`'s host path: every gradient comes back as the mean over the ranks in its own dtype,
//! large ones reduced in their own buffers, the rest in buckets.

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
use crate::plugins::strategy::StrategyParts;
use ember_plan::precision::Precision;

/// Rank 0 of two whose partner's gradients are all ones; records each all-reduce's length.
#[derive(Default)]
struct PartnerOfOnes {
    lengths: RefCell<Vec<(&'static str, usize)>>,
}

impl Collective for PartnerOfOnes {
    fn rank(&self) -> usize {
        0
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
    fn broadcast(&self, _: &mut Vec<u8>, _: usize) -> anyhow::Result<()> {
        Ok(())
    }
    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        Ok(vec![bytes.to_vec(), bytes.to_vec()])
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

fn ddp_over(collective: Rc<PartnerOfOnes>) -> Ddp {
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
    let collective = Rc::new(PartnerOfOnes::default());
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
