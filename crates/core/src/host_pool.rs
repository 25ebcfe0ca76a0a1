//! The thread a Trainer runs on computes as one of the threads of rayon's pool.
//!
//! burn-flex and gemm cut large element-wise loops and matrix products into pieces that run on
//! the rayon pool of the calling thread. A thread outside any pool (a program's main thread)
//! hands every such loop to the global pool's threads and sleeps until they finish: each op
//! wakes the pool and then the caller again, two context switches, while the caller's core idles
//! through the op. On a small transformer that is hundreds of hand-offs per step, and `perf`
//! put about an eighth of the step in the kernel's scheduler. A thread that is itself one of
//! the pool's threads runs a piece of each loop at once and hands the rest to the others; it
//! runs the rest too when they have not woken yet.
//!
//! So the Trainer makes the thread it runs on the first thread of a pool of its own, with as
//! many threads as rayon's global pool (`RAYON_NUM_THREADS`, or one per core): the thread
//! itself and the others, started now. The pool lasts as long as the thread. A thread that is
//! already in a pool (a Trainer run inside `ThreadPool::install`) is left there. Which threads
//! compute a piece never changes a value: the parallel loops are cut the same way on any pool.

use std::cell::RefCell;

thread_local! {
    /// The pool this thread joined, kept for as long as the thread lives: dropping it would
    /// stop its other threads.
    static POOL: RefCell<Option<rayon::ThreadPool>> = const { RefCell::new(None) };
}

/// Makes the calling thread the first thread of a rayon pool of its own, as many threads as
/// the global pool has, unless it is a pool's thread already; returns whether it is one now
/// (false only when the pool's threads could not be started).
pub fn join_compute_pool() -> bool {
    if rayon::current_thread_index().is_some() {
        return true;
    }
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(rayon::current_num_threads())
        .thread_name(|i| format!("ember-compute-{i}"))
        .use_current_thread()
        .build();
    match built {
        Ok(pool) => {
            POOL.with(|slot| *slot.borrow_mut() = Some(pool));
            true
        }
        Err(e) => {
            tracing::debug!("ember: the loop's thread stays outside rayon's pools: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_becomes_the_first_of_a_pool_as_large_as_the_global_one() {
        std::thread::spawn(|| {
            let threads = rayon::current_num_threads();
            assert_eq!(rayon::current_thread_index(), None);
            assert!(join_compute_pool());
            assert_eq!(rayon::current_thread_index(), Some(0));
            assert_eq!(rayon::current_num_threads(), threads);
            // Joining again keeps the same pool.
            assert!(join_compute_pool());
            assert_eq!(rayon::current_thread_index(), Some(0));
            // Parallel work and a broadcast reach every thread of the pool, this one included.
            let sum: u64 = rayon::prelude::ParallelIterator::sum(
                rayon::prelude::IntoParallelIterator::into_par_iter(0..10_000u64),
            );
            assert_eq!(sum, 49_995_000);
            let mut seen = rayon::broadcast(|c| c.index());
            seen.sort_unstable();
            assert_eq!(seen, (0..threads).collect::<Vec<_>>());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_of_another_pool_stays_there() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            let index = rayon::current_thread_index();
            assert!(join_compute_pool());
            assert_eq!(rayon::current_thread_index(), index);
            assert_eq!(rayon::current_num_threads(), 3);
        });
    }
}
