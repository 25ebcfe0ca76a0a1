//! The learning-rate finder (`--trainer.lr_find`, [`Trainer::lr_find`]): Lightning's range test.
//! A short fit of a copy of the model at rates rising step by step from `min_lr` to `max_lr`,
//! recording the smoothed loss after each step and stopping when it diverges; the suggestion is
//! the rate where the loss falls fastest. The model and the Trainer come back as they were.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Context;
use burn::tensor::backend::AutodiffBackend;
use plotters::prelude::*;

use super::data::DataModule;
use super::module::{BatcherFor, TrainingModule};
use super::{Trainer, weights};
use crate::callbacks::{Callback, CallbackContext};
use crate::error::FlagError;
use crate::options::{LrFind, SweepMode, TrainerOptions};
use crate::plugins::weights::{ModelWeights, Weights, host_weights};

/// What a sweep found: each step's rate and smoothed loss, and the suggestion.
#[derive(Debug, Clone, PartialEq)]
pub struct LrFinding {
    /// The rate of each step.
    pub lrs: Vec<f64>,
    /// The smoothed loss after each step.
    pub losses: Vec<f64>,
    /// Index of the suggested rate (Lightning's `_optimal_idx`); `None` with too few steps.
    pub suggested: Option<usize>,
}

impl LrFinding {
    /// The suggested rate.
    pub fn suggestion(&self) -> Option<f64> {
        self.suggested.map(|i| self.lrs[i])
    }

    /// Lightning's `suggestion(skip_begin=10, skip_end=1)`: among the losses after the first 10
    /// and before the last, the finite ones, the index of the steepest descent of the loss
    /// against the rate (torch's `gradient` with the rates as coordinates).
    fn suggest(lrs: &[f64], losses: &[f64]) -> Option<usize> {
        let (skip_begin, skip_end) = (10, 1);
        let end = losses.len().checked_sub(skip_end)?;
        let kept: Vec<usize> = (skip_begin..end)
            .filter(|&i| losses[i].is_finite())
            .collect();
        if kept.len() < 2 {
            return None;
        }
        let x: Vec<f64> = kept.iter().map(|&i| lrs[i]).collect();
        let y: Vec<f64> = kept.iter().map(|&i| losses[i]).collect();
        let slope = gradient(&x, &y);
        let steepest = (0..slope.len()).min_by(|&a, &b| slope[a].total_cmp(&slope[b]))?;
        Some(kept[steepest])
    }
}

/// torch's `gradient(y, spacing=[x])` (edge order 1): second-order differences on the
/// non-uniform grid inside, one-sided ones at the ends.
fn gradient(x: &[f64], y: &[f64]) -> Vec<f64> {
    let n = y.len();
    (0..n)
        .map(|i| match i {
            0 => (y[1] - y[0]) / (x[1] - x[0]),
            i if i == n - 1 => (y[i] - y[i - 1]) / (x[i] - x[i - 1]),
            i => {
                let (hl, hr) = (x[i] - x[i - 1], x[i + 1] - x[i]);
                (hl * hl * y[i + 1] - hr * hr * y[i - 1] + (hr * hr - hl * hl) * y[i])
                    / (hl * hr * (hl + hr))
            }
        })
        .collect()
}

/// The rate of sweep step `step` (from 0), as Lightning's `_ExponentialLR` and `_LinearLR` give
/// it: `min_lr` first, then `(step + 1) / num_training` of the way to `max_lr`.
pub fn sweep_rate(settings: &LrFind, step: u64) -> f64 {
    if step == 0 {
        return settings.min_lr;
    }
    let r = (step + 1) as f64 / settings.num_training as f64;
    match settings.mode {
        SweepMode::Exponential => settings.min_lr * (settings.max_lr / settings.min_lr).powf(r),
        SweepMode::Linear => settings.min_lr + r * (settings.max_lr - settings.min_lr),
    }
}

/// Sets each step's rate and records the smoothed loss after it, stopping the fit when the loss
/// diverges (Lightning's `_LRCallback`, beta 0.98).
#[derive(Clone)]
struct Sweep {
    settings: LrFind,
    found: Rc<RefCell<(Vec<f64>, Vec<f64>)>>,
    average: f64,
    best: f64,
    /// The global step at the latest batch end (a batch that only accumulates takes none).
    last_step: u64,
}

impl Sweep {
    const BETA: f64 = 0.98;

    fn set_rate(&self, ctx: &mut CallbackContext<'_>) {
        let rate = sweep_rate(&self.settings, ctx.state.global_step);
        ctx.state.override_lr(rate, self.name());
    }
}

impl Callback for Sweep {
    fn name(&self) -> &str {
        "LearningRateFinder"
    }

    fn on_fit_start(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.set_rate(ctx);
        Ok(())
    }

    fn on_train_batch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let step = ctx.state.global_step;
        if step == self.last_step {
            return Ok(());
        }
        self.last_step = step;
        let loss = (ctx.loss()).context("the finder reads the loss the training step returns")?;
        let rate = ctx.state.learning_rate;
        self.average = Self::BETA * self.average + (1.0 - Self::BETA) * loss;
        let smoothed = self.average / (1.0 - Self::BETA.powi(step as i32 + 1));
        let threshold = self.settings.early_stop_threshold;
        if threshold.is_some_and(|t| step > 1 && smoothed > t * self.best) {
            ctx.state.should_stop = true;
        }
        if smoothed < self.best || step == 1 {
            self.best = smoothed;
        }
        let mut found = self.found.borrow_mut();
        found.0.push(rate);
        found.1.push(smoothed);
        self.set_rate(ctx);
        Ok(())
    }
}

impl<B: AutodiffBackend> Trainer<B> {
    /// Lightning's learning-rate range test on a copy of `model`: `settings.num_training`
    /// optimizer steps (over as many epochs as that takes) at rates rising from `min_lr` to
    /// `max_lr`, no validation, nothing logged or saved, stopped when the smoothed loss exceeds
    /// `early_stop_threshold` times its best. `model` (its batch-norm statistics too) and the
    /// Trainer's settings are as they were afterwards. Under ddp every rank takes rank 0's
    /// finding.
    pub fn lr_find<M, D>(
        &mut self,
        model: &M,
        data: &mut D,
        settings: &LrFind,
    ) -> anyhow::Result<LrFinding>
    where
        M: TrainingModule<B>,
        D: DataModule,
        D::Batcher: BatcherFor<B, D::Item, M>,
    {
        weights::materialize(model);
        if super::loops::configure::is_manual(self, model)? {
            return Err(refused_under_manual(settings).into());
        }
        let kept = host_weights::<B, M>(model);
        let sweep = Sweep {
            settings: settings.clone(),
            found: Rc::default(),
            average: 0.0,
            best: 0.0,
            last_step: 0,
        };
        let options = TrainerOptions {
            max_epochs: None,
            max_steps: Some(settings.num_training),
            limit_val_batches: crate::options::Limit::Batches(0),
            num_sanity_val_steps: Some(0),
            enable_checkpointing: false,
            enable_progress_bar: false,
            enable_model_summary: false,
            logger: Vec::new(),
            callbacks: Vec::new(),
            ckpt_path: None,
            lr_find: None,
            profiler: None,
            ..self.options.clone()
        };
        let options = std::mem::replace(&mut self.options, options);
        let callbacks = std::mem::replace(&mut self.callbacks, vec![Box::new(sweep.clone())]);
        let loggers = self.loggers.take();
        let off = self.profiler.off();
        let profiler = std::mem::replace(&mut self.profiler, off);
        let fitted = self.fit(model.clone(), data);
        self.options = options;
        self.callbacks = callbacks;
        self.loggers = loggers;
        self.profiler = profiler;
        // A copy shares the model's running statistics, which the sweep moved.
        ModelWeights::<B, M>::new(&mut model.clone()).load_host(kept)?;
        fitted?;
        let (lrs, losses) = sweep.found.take();
        let mut suggested = LrFinding::suggest(&lrs, &losses);
        if self.collective().world_size() > 1 {
            let mut bytes = suggested
                .map_or(u64::MAX, |i| i as u64)
                .to_le_bytes()
                .to_vec();
            self.collective().broadcast(&mut bytes, 0)?;
            let index = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            suggested = (index != u64::MAX).then_some(index as usize);
        }
        Ok(LrFinding {
            lrs,
            losses,
            suggested,
        })
    }

    /// Refuses `--trainer.lr_find` where it cannot run: a fit that resumes, or hyperparameters
    /// with no rate for the suggestion to replace.
    pub(super) fn check_lr_find(&self) -> anyhow::Result<()> {
        let Some(settings) = &self.options.lr_find else {
            return Ok(());
        };
        if let Some(path) = &self.options.ckpt_path {
            return Err(FlagError::new(
                "--trainer.lr_find",
                shown(settings),
                format!(
                    "false when fit resumes (--trainer.ckpt_path={}): it finds a rate for a fit from the start; a resumed fit continues with its checkpoint's",
                    path.display()
                ),
            )
            .into());
        }
        self.lr_key(settings).map(drop)
    }

    /// `--trainer.lr_find` before a fit ([`check_lr_find`](Self::check_lr_find) passed): the
    /// sweep, its plot (rank 0, in the log directory), and the suggestion in the model's
    /// hyperparameters, where `configure_optimizers` reads it.
    pub(super) fn find_lr_before_fit<M, D>(&mut self, model: &M, data: &mut D) -> anyhow::Result<()>
    where
        M: TrainingModule<B>,
        D: DataModule,
        D::Batcher: BatcherFor<B, D::Item, M>,
    {
        let Some(settings) = self.options.lr_find.clone() else {
            return Ok(());
        };
        let key = self.lr_key(&settings)?;
        let finding = self.lr_find(model, data, &settings)?;
        let Some(lr) = finding.suggestion() else {
            eprintln!(
                "warning: lr_find: too few steps ({}) to suggest a rate; the model's own is used",
                finding.losses.len()
            );
            return Ok(());
        };
        self.hparams["model"][key.as_str()] = lr.into();
        if self.is_global_zero() {
            self.ensure_loggers()?;
            let dir = self
                .log_dir()
                .unwrap_or(&self.options.default_root_dir)
                .to_owned();
            let plot = plot(&finding, &dir.join(PLOT_FILE));
            let plotted = match &plot {
                Ok(path) => format!("; plot {}", path.display()),
                Err(e) => format!("; no plot: {e:#}"),
            };
            eprintln!(
                "lr_find: suggested learning rate {lr:.3e} (of {} steps from {:e} to {:e}), set as model.{key}{plotted}",
                finding.losses.len(),
                settings.min_lr,
                settings.max_lr
            );
        }
        Ok(())
    }

    /// The hyperparameter under `model` that takes the suggestion: `attr_name`, else `lr`,
    /// else `learning_rate`, whichever the hyperparameters hold.
    fn lr_key(&self, settings: &LrFind) -> anyhow::Result<String> {
        let section = &self.hparams["model"];
        let candidates = match settings.attr_name.as_str() {
            "" => vec!["lr", "learning_rate"],
            name => vec![name],
        };
        candidates
            .iter()
            .find(|key| section.get(**key).is_some_and(serde_json::Value::is_number))
            .map(|key| (*key).to_owned())
            .ok_or_else(|| {
                FlagError::new(
                    "--trainer.lr_find",
                    shown(settings),
                    format!(
                        "a model whose hyperparameters hold its rate as model.{}: the suggestion goes there for configure_optimizers (name another key with attr_name)",
                        candidates.join(" or model.")
                    ),
                )
                .into()
            })
    }
}

/// The finder's settings as an error shows them: `true` for Lightning's, else the table.
fn shown(settings: &LrFind) -> String {
    match settings == &LrFind::default() {
        true => "true".into(),
        false => serde_json::to_string(settings).unwrap_or_default(),
    }
}

/// The refusal of the finder for a model that steps its optimizers itself.
pub(super) fn refused_under_manual(settings: &LrFind) -> FlagError {
    FlagError::new(
        "--trainer.lr_find",
        shown(settings),
        "false under manual optimization: the finder reads the loss training_step returns and sets the rate of one optimizer",
    )
}

/// The picture of a sweep.
pub const PLOT_FILE: &str = "lr_find.png";

/// Draws the smoothed loss against the rate (log scale for an exponential sweep), the
/// suggestion marked in red, to `path`.
pub fn plot(finding: &LrFinding, path: &Path) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        crate::loggers::curves::font_ready(),
        "no font for the labels (Debian's fonts-dejavu-core has one)"
    );
    let points: Vec<(f64, f64)> = (finding.lrs.iter().copied())
        .zip(finding.losses.iter().copied())
        .filter(|(_, loss)| loss.is_finite())
        .collect();
    anyhow::ensure!(points.len() >= 2, "too few finite losses to draw");
    let (x0, x1) = (points[0].0, points.last().expect("two points").0);
    let (y0, y1) = crate::loggers::curves::padded(points.iter().map(|p| p.1));
    let root = BitMapBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("learning-rate finder", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), y0..y1)?;
    chart
        .configure_mesh()
        .x_desc("learning rate")
        .y_desc("smoothed loss")
        .x_label_formatter(&|x| format!("{x:.0e}"))
        .draw()?;
    chart.draw_series(LineSeries::new(
        points.iter().copied(),
        BLUE.stroke_width(2),
    ))?;
    if let Some(i) = finding.suggested {
        let point = (finding.lrs[i], finding.losses[i]);
        chart.draw_series(std::iter::once(Circle::new(point, 6, RED.filled())))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_rise_as_lightnings_schedulers() {
        let settings = LrFind {
            min_lr: 1e-4,
            max_lr: 1.0,
            num_training: 4,
            ..Default::default()
        };
        // _ExponentialLR: the base rate, then base * (end / base) ** ((step + 1) / num_iter).
        let rates: Vec<f64> = (0..4).map(|s| sweep_rate(&settings, s)).collect();
        let expected = [1e-4, 1e-4 * 1e4f64.powf(0.5), 1e-4 * 1e4f64.powf(0.75), 1.0];
        for (got, want) in rates.iter().zip(expected) {
            assert!((got / want - 1.0).abs() < 1e-12, "{rates:?}");
        }
        let linear = LrFind {
            mode: SweepMode::Linear,
            ..settings
        };
        assert!((sweep_rate(&linear, 1) - (1e-4 + 0.5 * (1.0 - 1e-4))).abs() < 1e-12);
    }

    #[test]
    fn the_suggestion_is_the_steepest_descent_against_the_rate() {
        // torch.gradient(y, spacing=[x]) for y = x^2 on x = [0, 1, 3]: [1, 2 (exact 2x), 4].
        assert_eq!(
            gradient(&[0.0, 1.0, 3.0], &[0.0, 1.0, 9.0]),
            [1.0, 2.0, 4.0]
        );
        // 20 steps: flat, a fall between steps 14 and 15, flat, then a rise.
        let lrs: Vec<f64> = (0..20).map(|i| 10f64.powi(i - 10)).collect();
        let mut losses = vec![2.0; 20];
        for loss in &mut losses[15..] {
            *loss = 1.0;
        }
        losses[19] = 5.0;
        losses[12] = f64::NAN;
        // At 14 the fall weighs over the wider step on its right (slope about -1e-6), at 15
        // over the narrower one on its left (about -1e-5): numpy's gradient gives 15 too.
        let suggested = LrFinding::suggest(&lrs, &losses).unwrap();
        assert_eq!(suggested, 15, "skipping the first 10 and the last");
        assert_eq!(
            LrFinding::suggest(&lrs[..11], &losses[..11]),
            None,
            "too few"
        );
    }
}
