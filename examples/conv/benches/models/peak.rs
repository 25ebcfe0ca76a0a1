//! This machine's peak FLOP/s, which each contender's share is read against.

use std::time::Instant;

use burn::prelude::*;

/// The GEMM probe's results over a run: it probes before every round, since a shared VM's
/// cores change speed over seconds and one probe can land in a slow stretch.
#[derive(Default)]
pub struct Probes(Vec<f64>);

impl Probes {
    /// Probes now on `threads` threads and keeps the result.
    pub fn probe(&mut self, threads: usize) {
        self.0.push(gemm_peak(threads));
    }

    /// The highest FLOP/s any probe reached: the peak shares are read against it.
    pub fn peak(&self) -> f64 {
        self.0.iter().copied().fold(f64::NAN, f64::max)
    }

    /// The lowest FLOP/s a probe reached, to show how far the machine's speed moved.
    pub fn lowest(&self) -> f64 {
        self.0.iter().copied().fold(f64::NAN, f64::min)
    }

    /// How many probes ran.
    pub fn count(&self) -> usize {
        self.0.len()
    }
}

/// The highest FLOP/s of a 1024×1024 by 1024×1024 matrix product on burn-flex (the `gemm`
/// crate, which torch's kernels match on this machine's vector width) on `threads` threads:
/// the best of 10 after a warm-up.
fn gemm_peak(threads: usize) -> f64 {
    use burn::tensor::Distribution;
    use burn_flex::{Flex, FlexDevice};
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool for the GEMM probe");
    pool.install(|| {
        let n = 1024;
        let a = Tensor::<Flex, 2>::random([n, n], Distribution::Default, &FlexDevice);
        let b = Tensor::<Flex, 2>::random([n, n], Distribution::Default, &FlexDevice);
        let _ = a.clone().matmul(b.clone()).into_data();
        let best = (0..10)
            .map(|_| {
                let start = Instant::now();
                let _ = a.clone().matmul(b.clone()).into_data();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        2.0 * (n * n * n) as f64 / best
    })
}
