//! A user's gradient view that offers no [`ParallelGradients`] reaches the data-parallel paths
//! that need them: `ddp` over a device collective and `ddp_sharded`'s norm over the ranks
//! refuse it with an error that names what is missing, instead of reducing wrong gradients.

use std::rc::Rc;
use std::sync::Arc;

use burn::module::ParamId;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};

use super::DdpSharded;
use crate::checkpoint_io::LocalCheckpointIO;
use crate::collective::{Collective, ReduceOp};
use crate::options::ClipAlgorithm;
use crate::plan::Plan;
use crate::plugins::access::{Gradients, ModelGradients};
use crate::plugins::ddp::Ddp;
use crate::plugins::device_reduce::DeviceCollective;
use crate::plugins::precision::TruePrecision;
use crate::plugins::strategy::{Strategy, StrategyParts};
use crate::plugins::weights::ModelWeights;
use ember_plan::precision::Precision;

type B = burn_autodiff::Autodiff<burn_flex::Flex>;

/// A view as a user writes one: the required methods, forwarded; no `parallel()`.
struct Opaque<'g>(&'g mut dyn Gradients);

impl Gradients for Opaque<'_> {
    fn take_host(&mut self) -> Vec<(ParamId, TensorData)> {
        self.0.take_host()
    }
    fn put_host(&mut self, grads: Vec<(ParamId, TensorData)>) {
        self.0.put_host(grads);
    }
    fn scale(&mut self, factor: f64) {
        self.0.scale(factor);
    }
    fn global_norm(&self) -> Option<f64> {
        self.0.global_norm()
    }
    fn all_finite(&self) -> bool {
        self.0.all_finite()
    }
    fn clip(&mut self, algorithm: ClipAlgorithm, threshold: f64) {
        self.0.clip(algorithm, threshold);
    }
    fn params(&mut self) -> &mut GradientsParams {
        self.0.params()
    }
}

/// Rank 0 of two, whose partner sends back what it was given; aborting panics.
struct TwoRanks;

impl Collective for TwoRanks {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
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
        Ok(vec![bytes.to_vec(), bytes.to_vec()])
    }
    fn abort(&self, code: i32) -> ! {
        panic!("abort({code})")
    }
}

/// A device collective that must not be reached.
struct Unreached;

impl DeviceCollective for Unreached {
    fn name(&self) -> &str {
        "unreached"
    }
    fn all_reduce_sum(&self, _: &mut dyn std::any::Any) -> anyhow::Result<()> {
        anyhow::bail!("the device collective was reached")
    }
}

fn parts(device_collective: Option<Box<dyn DeviceCollective>>) -> StrategyParts {
    StrategyParts {
        plan: Plan::local("cpu", Precision::F32True),
        collective: Rc::new(TwoRanks),
        precision: Box::new(TruePrecision(Precision::F32True)),
        checkpoint_io: Arc::new(LocalCheckpointIO),
        bucket_cap_bytes: 1 << 20,
        sync_batchnorm: false,
        device_collective,
    }
}

/// A linear layer and the gradients of one loss.
fn model_and_grads() -> (Linear<B>, GradientsParams) {
    let device = Default::default();
    let model = LinearConfig::new(3, 2).init::<B>(&device);
    let x = Tensor::<B, 2>::from_data([[0.5, -1.0, 2.0]], &device);
    let grads = GradientsParams::from_grads(model.forward(x).sum().backward(), &model);
    (model, grads)
}

fn names_what_is_missing(e: &anyhow::Error) {
    let e = e.to_string();
    assert!(e.contains("ParallelGradients"), "{e}");
}

#[test]
fn ddp_on_a_device_collective_refuses_a_view_without_parallel_gradients() {
    let (model, mut grads) = model_and_grads();
    let mut own = ModelGradients::<B, _>::new(&model, &mut grads);
    let mut ddp = Ddp::new(parts(Some(Box::new(Unreached))));
    let e = ddp.reduce_gradients(&mut Opaque(&mut own)).unwrap_err();
    names_what_is_missing(&e);
    // The Trainer's own gradients get as far as the device collective.
    let e = ddp.reduce_gradients(&mut own).unwrap_err();
    assert!(e.to_string().contains("was reached"), "{e}");
}

#[test]
fn ddp_sharded_refuses_a_view_without_parallel_gradients() {
    let (mut model, mut grads) = model_and_grads();
    let mut sharded = DdpSharded::new(parts(Some(Box::new(Unreached))));
    sharded.partition_of(&ModelWeights::<B, _>::new(&mut model));
    let mut own = ModelGradients::<B, _>::new(&model, &mut grads);
    let mut opaque = Opaque(&mut own);
    let mut view = sharded.precision_view(&mut opaque);
    let parallel = view.parallel_mut().expect("the sharded view offers them");
    let e = parallel
        .average_on_device(&Unreached, 2, 1 << 20)
        .unwrap_err();
    names_what_is_missing(&e);
    // The norm over the ranks cannot return an error: it ends the run (here: a panic).
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| view.global_norm()));
    let panic = ended.unwrap_err();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some("abort(1)")
    );
    drop(view);
    // Over the Trainer's own gradients the norm is made from every rank's parts (here the
    // partner sends this rank's parts back, which fill the same places): one process's norm.
    let alone = own.global_norm().unwrap();
    let norm = sharded.precision_view(&mut own).global_norm().unwrap();
    assert_eq!(norm, alone);
}
