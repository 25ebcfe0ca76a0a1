//! The learning-rate scheduler a run's config chooses (LightningCLI's `--lr_scheduler`
//! section): torch's class names and arguments, read into burn's schedulers
//! ([`AnyScheduler`]), and when it steps.

use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::optim::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::optim::lr_scheduler::step::StepLrSchedulerConfig;
use serde::{Deserialize, Serialize};

use super::any::AnyScheduler;

/// When the learning-rate scheduler steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerInterval {
    /// Once per optimizer step (burn's convention).
    #[default]
    Step,
    /// Once per epoch.
    Epoch,
}

/// A learning-rate scheduler by torch's class name, with torch's arguments and defaults, and
/// when it steps (`interval`: `epoch`, Lightning's default for a configured scheduler, or
/// `step`). It starts from the optimizer's `lr`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSpec {
    /// Which scheduler, and its arguments.
    #[serde(flatten)]
    pub kind: SchedulerKind,
    /// When it steps.
    #[serde(default = "epoch")]
    pub interval: SchedulerInterval,
}

fn epoch() -> SchedulerInterval {
    SchedulerInterval::Epoch
}

/// The schedulers, by torch's class names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "class_path", content = "init_args")]
pub enum SchedulerKind {
    /// `lr × gamma^(n / step_size)` at its n-th step.
    StepLR {
        /// Steps between decays.
        step_size: usize,
        /// The decay factor.
        #[serde(default = "tenth")]
        gamma: f64,
    },
    /// `lr × gamma^n`.
    ExponentialLR {
        /// The decay factor.
        gamma: f64,
    },
    /// Half a cosine from `lr` down to `eta_min` over `T_max` steps.
    CosineAnnealingLR {
        /// Steps from `lr` to `eta_min`.
        #[serde(rename = "T_max")]
        t_max: usize,
        /// The lowest rate.
        #[serde(default)]
        eta_min: f64,
    },
    /// From `lr × start_factor` to `lr × end_factor` in `total_iters` steps, then constant.
    LinearLR {
        /// The first rate's share of `lr`.
        #[serde(default = "third")]
        start_factor: f64,
        /// The last rate's share of `lr`.
        #[serde(default = "one")]
        end_factor: f64,
        /// Steps from the first rate to the last.
        #[serde(default = "five")]
        total_iters: usize,
    },
}

fn tenth() -> f64 {
    0.1
}

fn third() -> f64 {
    1.0 / 3.0
}

fn one() -> f64 {
    1.0
}

fn five() -> usize {
    5
}

impl SchedulerSpec {
    /// The scheduler, starting from the rate `lr`; burn's refusal of its arguments as text.
    pub fn init(&self, lr: f64) -> Result<AnyScheduler, String> {
        Ok(match self.kind {
            SchedulerKind::StepLR { step_size, gamma } => AnyScheduler::Step(
                StepLrSchedulerConfig::new(lr, step_size)
                    .with_gamma(gamma)
                    .init()?,
            ),
            SchedulerKind::ExponentialLR { gamma } => {
                AnyScheduler::Exponential(ExponentialLrSchedulerConfig::new(lr, gamma).init()?)
            }
            SchedulerKind::CosineAnnealingLR { t_max, eta_min } => AnyScheduler::Cosine(
                CosineAnnealingLrSchedulerConfig::new(lr, t_max)
                    .with_min_lr(eta_min)
                    .init()?,
            ),
            SchedulerKind::LinearLR {
                start_factor,
                end_factor,
                total_iters,
            } => AnyScheduler::Linear(
                LinearLrSchedulerConfig::new(lr * start_factor, lr * end_factor, total_iters)
                    .init()?,
            ),
        })
    }
}
