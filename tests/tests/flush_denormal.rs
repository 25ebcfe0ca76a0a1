//! `--trainer.flush_denormal`: a run on the cpu accelerator flushes subnormal floats to zero on
//! the loop's thread and on every thread of its rayon pool (where burn-flex and gemm run their
//! parallel kernels); with `flush_denormal=false` it does not. The mode is set before the run on
//! the global pool too, which belongs to the whole process, so this file holds one test, in a
//! test binary of its own.

use std::hint::black_box;
use std::sync::{Arc, Mutex};

use burn_autodiff::Autodiff;
use burn_flex::Flex;
use ember::callbacks::{Callback, CallbackContext};
use ember::cpu::CpuAccelerator;
use ember::set_flush_denormal_everywhere;
use ember::{Plan, Precision, Trainer, TrainerOptions};
use ember_acceptance::regression::{Regression, data};

type B = Autodiff<Flex>;

/// 1e-20 × 1e-20 = 1e-40: subnormal in f32, or 0 when flushed.
fn subnormal_product() -> f32 {
    black_box(1e-20f32) * black_box(1e-20f32)
}

/// What one training batch saw: the product on the loop's thread and on each pool thread.
type Seen = Arc<Mutex<Vec<(f32, Vec<f32>)>>>;

struct Probe(Seen);

impl Callback for Probe {
    fn name(&self) -> &str {
        "Probe"
    }

    fn on_train_batch_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let pool = rayon::broadcast(|_| subnormal_product());
        self.0.lock().unwrap().push((subnormal_product(), pool));
        Ok(())
    }
}

/// Builds a Trainer with `option` as the plan's choice (`None`: `Plan::local`'s) and fits the regression on a thread of its own, with the
/// opposite mode set beforehand, so only the Trainer can have set what the probe sees.
fn run(option: Option<bool>, expect_flushed: bool) -> Vec<(f32, Vec<f32>)> {
    std::thread::spawn(move || {
        set_flush_denormal_everywhere(!expect_flushed);
        let dir = tempfile::tempdir().unwrap();
        let options = TrainerOptions {
            max_epochs: Some(1),
            seed: Some(1),
            enable_progress_bar: false,
            enable_checkpointing: false,
            logger: Vec::new(),
            default_root_dir: dir.path().to_owned(),
            ..TrainerOptions::default()
        };
        let seen = Seen::default();
        let mut plan = Plan::local("cpu", Precision::F32True);
        if let Some(on) = option {
            plan.flush_denormal = on;
        }
        let mut trainer = Trainer::<B>::new::<CpuAccelerator>(&plan, options)
            .unwrap()
            .with_callback(Probe(Arc::clone(&seen)));
        assert_eq!(
            trainer.strategy().parts().plan.flush_denormal,
            expect_flushed
        );
        // Cleared again after building: fit itself must set the mode.
        set_flush_denormal_everywhere(!expect_flushed);
        let model = Regression::<B>::new(trainer.device());
        trainer.fit(model, &mut data(16, 0, 8)).unwrap();
        seen.lock().unwrap().clone()
    })
    .join()
    .unwrap()
}

#[test]
fn a_cpu_run_flushes_subnormals_on_its_thread_and_every_pool_thread_unless_told_not_to() {
    for (option, flushed) in [(None, true), (Some(false), false), (Some(true), true)] {
        let seen = run(option, flushed);
        assert_eq!(seen.len(), 2, "two training batches");
        for (on_loop_thread, on_pool) in seen {
            assert_eq!(on_pool.len(), rayon::current_num_threads());
            let products = std::iter::once(on_loop_thread).chain(on_pool);
            for product in products {
                assert_eq!(
                    product == 0.0,
                    flushed,
                    "flush_denormal={option:?}: 1e-20 * 1e-20 gave {product:e}"
                );
            }
        }
    }
}
