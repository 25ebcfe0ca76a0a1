//! The learning rate of a transformer fit: a linear warm-up, then a cosine decay to a floor.

use burn::optim::LearningRate;
use burn::optim::lr_scheduler::LrScheduler;
use burn::tensor::backend::Backend;

/// Linear warm-up from `peak / warmup` to `peak` over `warmup` steps, then a cosine from
/// `peak` down to `floor` over `decay` steps, then `floor`. Its state is the step count.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupCosine {
    peak: f64,
    floor: f64,
    warmup: usize,
    decay: usize,
    step: usize,
}

impl WarmupCosine {
    /// The schedule; `warmup` and `decay` of 0 skip that phase.
    pub fn new(peak: f64, floor: f64, warmup: usize, decay: usize) -> Self {
        Self {
            peak,
            floor,
            warmup,
            decay,
            step: 0,
        }
    }

    /// The rate of (1-based) step `step`.
    fn rate(&self, step: usize) -> f64 {
        if step <= self.warmup {
            return self.peak * step as f64 / self.warmup as f64;
        }
        let t = (step - self.warmup) as f64 / self.decay.max(1) as f64;
        if t >= 1.0 {
            return self.floor;
        }
        self.floor + 0.5 * (self.peak - self.floor) * (1.0 + (std::f64::consts::PI * t).cos())
    }
}

impl LrScheduler for WarmupCosine {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> LearningRate {
        self.step += 1;
        self.rate(self.step)
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, record: usize) -> Self {
        self.step = record;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_linearly_then_decays_along_a_cosine_to_the_floor() {
        let mut s = WarmupCosine::new(1.0, 0.1, 4, 10);
        let rates: Vec<f64> = (0..16).map(|_| s.step()).collect();
        assert_eq!(&rates[..4], &[0.25, 0.5, 0.75, 1.0]);
        assert!(
            (rates[4] - (0.1 + 0.45 * (1.0 + (0.1 * std::f64::consts::PI).cos()))).abs() < 1e-12
        );
        assert!((rates[8] - 0.55).abs() < 1e-12, "halfway: {}", rates[8]);
        assert!(rates.windows(2).skip(3).all(|w| w[1] <= w[0]));
        assert_eq!(&rates[13..], &[0.1, 0.1, 0.1]);
    }
}
