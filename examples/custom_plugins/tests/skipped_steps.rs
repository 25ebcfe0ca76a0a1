//! Ranks agree about every step. Local SGD averages no gradients, so each rank decides alone
//! whether its gradients are finite; with the static loss scale skipping non-finite steps and
//! one rank's gradients poisoned every few steps, the ranks must still skip the same steps (or
//! one would make an averaging all-reduce the other does not). Two ranks run as two threads of
//! this test, each with its own Trainer, joined by an in-memory collective.

use std::rc::Rc;
use std::sync::{Arc, Barrier, Mutex};

use custom_plugins::{LocalSgd, StaticLossScale};
use digits::Digits;
use digits::data::DigitsData;
use digits::train::DataConfig;
use ember::cpu::CpuAccelerator;
use ember::plugins::{Collective, Gradients, PrecisionPlugin, ReduceOp};
use ember::{App, Plan, Plugin, Precision, Trainer, TrainerOptions};

type B = <CpuAccelerator as ember::Accelerator>::Backend;

/// Epochs of the run (digits' batches of 64, split over 2 ranks: about 12 steps each).
const EPOCHS: u64 = 4;
/// Every this many unscales, rank 1's gradients become NaN.
const POISON_EVERY: u64 = 6;

/// What the two threads share: one slot per rank and a barrier.
struct Exchange {
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

/// One rank's side of an in-memory collective over [`Exchange`]: each operation exchanges
/// every rank's bytes, then combines them.
struct Threads {
    rank: usize,
    world: usize,
    exchange: Arc<Exchange>,
}

impl Threads {
    fn gather(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        self.exchange.slots.lock().unwrap()[self.rank] = mine;
        self.exchange.barrier.wait();
        let all = self.exchange.slots.lock().unwrap().clone();
        self.exchange.barrier.wait();
        all
    }

    fn reduce<const N: usize, T: Copy>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        to: fn(T) -> [u8; N],
        from: fn([u8; N]) -> T,
        combine: fn(T, T, ReduceOp) -> T,
    ) -> anyhow::Result<()> {
        let mine = buf.iter().flat_map(|&v| to(v)).collect();
        let all = self.gather(mine);
        for (rank, bytes) in all.iter().enumerate() {
            anyhow::ensure!(
                bytes.len() == buf.len() * N,
                "all_reduce: rank {rank} sent {} bytes, this rank {}",
                bytes.len(),
                buf.len() * N
            );
        }
        for (i, value) in buf.iter_mut().enumerate() {
            let mut values = all
                .iter()
                .map(|bytes| from(bytes[i * N..(i + 1) * N].try_into().unwrap()));
            let first = values.next().unwrap();
            *value = values.fold(first, |a, b| combine(a, b, op));
        }
        Ok(())
    }
}

fn combine_f64(a: f64, b: f64, op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

impl Collective for Threads {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn barrier(&self) -> anyhow::Result<()> {
        self.gather(Vec::new());
        Ok(())
    }
    fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> anyhow::Result<()> {
        let combine = |a: f32, b: f32, op| combine_f64(a.into(), b.into(), op) as f32;
        self.reduce(buf, op, f32::to_le_bytes, f32::from_le_bytes, combine)
    }
    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp) -> anyhow::Result<()> {
        self.reduce(buf, op, f64::to_le_bytes, f64::from_le_bytes, combine_f64)
    }
    fn broadcast(&self, buf: &mut Vec<u8>, root: usize) -> anyhow::Result<()> {
        *buf = self.gather(buf.clone()).swap_remove(root);
        Ok(())
    }
    fn all_gather(&self, bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
        Ok(self.gather(bytes.to_vec()))
    }
    fn abort(&self, code: i32) -> ! {
        panic!("rank {} aborted the run with {code}", self.rank)
    }
}

/// The docs' static loss scale, with this rank's gradients made NaN at every
/// `POISON_EVERY`-th unscale when `poisoned`.
struct Poisoned {
    inner: StaticLossScale,
    poisoned: bool,
    unscales: u64,
}

impl PrecisionPlugin for Poisoned {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn precision(&self) -> Precision {
        self.inner.precision()
    }
    fn loss_scale(&self) -> Option<f64> {
        self.inner.loss_scale()
    }
    fn unscale_gradients(&mut self, grads: &mut dyn Gradients) -> bool {
        self.unscales += 1;
        if self.poisoned && self.unscales.is_multiple_of(POISON_EVERY) {
            grads.scale(f64::NAN);
        }
        self.inner.unscale_gradients(grads)
    }
    fn on_step_decided(&mut self, taken: bool) {
        self.inner.on_step_decided(taken);
    }
    fn state(&self) -> Option<serde_json::Value> {
        self.inner.state()
    }
}

/// Rank `rank` of 2 fits digits with local SGD (averaging every 4 steps) under the poisoned
/// static loss scale: its global step and its skipped steps. The fit fails unless the
/// replicas end equal (local SGD's last average, then ddp's replica check).
fn rank_fits(rank: usize, exchange: Arc<Exchange>) -> anyhow::Result<(u64, u64)> {
    let root = tempfile::tempdir()?;
    let mut plan = Plan::local("cpu", Precision::Bf16Mixed);
    plan.strategy = LocalSgd::NAME.to_owned();
    plan.precision_plugin = Some(StaticLossScale::NAME.to_owned());
    (plan.world_size, plan.global_rank) = (2, rank);
    let options = TrainerOptions {
        seed: Some(7),
        max_epochs: Some(EPOCHS),
        enable_progress_bar: false,
        enable_checkpointing: false,
        enable_model_summary: false,
        default_root_dir: root.path().to_owned(),
        ..TrainerOptions::default()
    };
    let precision = Poisoned {
        inner: StaticLossScale {
            scale: 1024.0,
            skipped: 0,
        },
        poisoned: rank == 1,
        unscales: 0,
    };
    let collective = Threads {
        rank,
        world: 2,
        exchange,
    };
    let mut trainer = Trainer::<B>::builder(&plan, options)
        .strategy(|parts| Ok(Box::new(LocalSgd::new(parts, 4))))
        .plugins([Plugin::precision(precision)])
        .collective(Rc::new(collective))
        .build::<CpuAccelerator>()?;
    let model = Digits::model(&Default::default(), &Default::default());
    let fitted = trainer.fit(model, &mut DigitsData::new(DataConfig::default()))?;
    let skipped = trainer.precision().state().unwrap()["skipped"]
        .as_u64()
        .unwrap();
    Ok((fitted.global_step, skipped))
}

#[test]
fn local_sgd_with_one_rank_skipping_steps_trains_to_the_end_with_every_rank_skipping_the_same() {
    let exchange = Arc::new(Exchange {
        slots: Mutex::new(vec![Vec::new(); 2]),
        barrier: Barrier::new(2),
    });
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let exchange = Arc::clone(&exchange);
            std::thread::spawn(move || rank_fits(rank, exchange))
        })
        .collect();
    let results: Vec<_> = ranks
        .into_iter()
        .map(|r| r.join().unwrap().map_err(|e| format!("{e:#}")))
        .collect();
    let [zero, one] = [&results[0], &results[1]].map(|r| r.clone().unwrap());
    assert_eq!(zero.0, one.0, "both ranks train to the end");
    assert!(zero.0 >= EPOCHS * 10, "{} steps", zero.0);
    let poisoned = zero.0 / POISON_EVERY;
    assert_eq!(
        (zero.1, one.1),
        (poisoned, poisoned),
        "every rank skips the steps rank 1 could not take, and only those"
    );
}
