//! Three plugins written outside ember's crates, as an expert user writes them:
//!
//! - [`LocalSgd`], a strategy: data parallel without a gradient all-reduce; every `k` optimizer
//!   steps the ranks average their weights instead (local SGD), so they talk `k` times less.
//! - [`StaticLossScale`], a precision plugin: bf16-mixed with a fixed loss scale, skipping steps
//!   whose gradients are not finite.
//! - [`RenamedElastic`], a cluster environment: a torchelastic-style reader of a scheduler
//!   that names its variables `JOB_*`.
//! - [`EpochLine`], a callback selectable by name: a line per training epoch with the metrics
//!   its `init_args` name; [`WeightNorm`], a callback that logs the weights' norm;
//!   [`JsonLines`], a logger selectable by name; [`Mirrored`], a checkpoint IO that takes
//!   arguments.
//!
//! `src/main.rs` registers them; see `docs/plugins.md`.

use ember::burn::tensor::{DType, TensorData};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use ember::callbacks::{Callback, CallbackContext};
use ember::loggers::Logger;
use ember::plugins::{
    CheckpointIO, ClusterEnvironment, Ddp, Env, Gradients, LocalCheckpointIO, PrecisionPlugin,
    Ranks, ReduceOp, Strategy, StrategyParts, Weights,
};
use ember::{FlagError, Plan, Precision};

/// Local SGD: each rank steps on its own gradients; every `every` steps the weights are
/// averaged over the ranks (and once more at the end of `fit`, so the replicas agree).
pub struct LocalSgd {
    inner: Ddp,
    every: u64,
    /// The global step of the last average (0 before the first).
    averaged_at: u64,
    /// Averages made in this fit (logged as `local_sgd_averages`).
    averages: u64,
}

/// [`LocalSgd`]'s `init_args`: `--trainer.strategy='{class_path: local_sgd, init_args:
/// {every: 8}}'`.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSgdArgs {
    /// Optimizer steps between two weight averages (at least 1).
    pub every: u64,
}

impl Default for LocalSgdArgs {
    fn default() -> Self {
        Self { every: 4 }
    }
}

impl LocalSgd {
    /// Name it is registered under.
    pub const NAME: &'static str = "local_sgd";

    /// Local SGD over `parts`, averaging as the `init_args` in its plan say (every 4 steps
    /// without any): what its registered factory builds.
    pub fn from_parts(parts: StrategyParts) -> anyhow::Result<Self> {
        let args: LocalSgdArgs = parts.plan.init_args(Self::NAME)?;
        anyhow::ensure!(args.every >= 1, "local_sgd: every must be at least 1");
        Ok(Self::new(parts, args.every))
    }

    /// Local SGD over `parts`, averaging weights every `every` optimizer steps.
    pub fn new(parts: StrategyParts, every: u64) -> Self {
        Self {
            inner: Ddp::new(parts),
            every: every.max(1),
            averaged_at: 0,
            averages: 0,
        }
    }

    /// Its plan-time check: with one process there is nothing to average, and a run that asked
    /// for local SGD on one device almost surely forgot `--trainer.devices`.
    pub fn check_plan(plan: &Plan) -> Result<(), String> {
        if plan.world_size < 2 {
            return Err(format!(
                "it averages weights over ranks and this run has {} process; use --trainer.devices=2 or more, or --trainer.strategy=ddp",
                plan.world_size
            ));
        }
        Ok(())
    }

    /// Replaces every float weight by its mean over the ranks.
    fn average(&self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        let world = self.collective().world_size();
        if world < 2 {
            return Ok(());
        }
        let mut averaged = Vec::new();
        for (id, data) in weights.to_host() {
            let (dtype, shape) = (data.dtype, data.shape.clone());
            let mut values: Vec<f64> = data.convert_dtype(DType::F64).to_vec()?;
            self.collective()
                .all_reduce_f64(&mut values, ReduceOp::Sum)?;
            values.iter_mut().for_each(|v| *v /= world as f64);
            averaged.push((id, TensorData::new(values, shape).convert_dtype(dtype)));
        }
        weights.load_host(averaged)
    }
}

impl Strategy for LocalSgd {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn parts(&self) -> &StrategyParts {
        self.inner.parts()
    }

    fn parts_mut(&mut self) -> &mut StrategyParts {
        self.inner.parts_mut()
    }

    /// Every rank starts from rank 0's weights, as under ddp.
    fn setup_weights(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.inner.setup_weights(weights)
    }

    /// No all-reduce: each rank keeps its own gradients.
    fn reduce_gradients(&mut self, _grads: &mut dyn Gradients) -> anyhow::Result<()> {
        Ok(())
    }

    /// Called after the steps that were taken (on every rank alike: a step is skipped on all
    /// of them or on none), so an average whose step was skipped happens at the next step taken.
    fn on_optimizer_step(
        &mut self,
        weights: &mut dyn Weights,
        global_step: u64,
    ) -> anyhow::Result<()> {
        if global_step / self.every > self.averaged_at / self.every {
            self.average(weights)?;
            self.averaged_at = global_step;
            self.averages += 1;
        }
        Ok(())
    }

    /// Logged with every step, as the model's own step values are.
    fn step_metrics(&self) -> Vec<(String, f64)> {
        vec![("local_sgd_averages".to_owned(), self.averages as f64)]
    }

    /// A last average, then the same replica check as ddp.
    fn teardown(&mut self, weights: &mut dyn Weights) -> anyhow::Result<()> {
        self.average(weights)?;
        self.inner.teardown(weights)
    }
}

/// bf16-mixed with a fixed loss scale: the loss is multiplied by `scale` before backward, the
/// gradients divided by it after, and a step whose gradients are not finite is skipped.
#[derive(Debug, Clone)]
pub struct StaticLossScale {
    /// The loss scale.
    pub scale: f64,
    /// Steps skipped so far (kept in checkpoints).
    pub skipped: u64,
}

/// [`StaticLossScale`]'s `init_args`: `--trainer.precision='{class_path: bf16-static-scale,
/// init_args: {scale: 256}}'`.
#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticLossScaleArgs {
    /// The loss scale.
    pub scale: f64,
}

impl Default for StaticLossScaleArgs {
    fn default() -> Self {
        Self { scale: 1024.0 }
    }
}

impl StaticLossScale {
    /// Name it is registered under.
    pub const NAME: &'static str = "bf16-static-scale";

    /// The plugin as the `init_args` in `plan` say (a scale of 1024 without any): what its
    /// registered factory builds.
    pub fn from_plan(plan: &Plan) -> anyhow::Result<Self> {
        let args: StaticLossScaleArgs = plan.init_args(Self::NAME)?;
        Ok(Self {
            scale: args.scale,
            skipped: 0,
        })
    }
}

impl PrecisionPlugin for StaticLossScale {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn precision(&self) -> Precision {
        Precision::Bf16Mixed
    }

    fn loss_scale(&self) -> Option<f64> {
        Some(self.scale)
    }

    /// This rank's verdict: whether its gradients are finite.
    fn unscale_gradients(&mut self, grads: &mut dyn Gradients) -> bool {
        grads.scale(1.0 / self.scale);
        grads.all_finite()
    }

    /// What the ranks decided together (a step is skipped on every rank when any rank's
    /// gradients were not finite): counted here, so every rank counts the same.
    fn on_step_decided(&mut self, taken: bool) {
        if !taken {
            self.skipped += 1;
        }
    }

    fn step_metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("static_loss_scale".to_owned(), self.scale),
            ("static_skipped".to_owned(), self.skipped as f64),
        ]
    }

    fn state(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "skipped": self.skipped }))
    }

    fn load_state(&mut self, state: &serde_json::Value) -> anyhow::Result<()> {
        self.skipped = state["skipped"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("expected {{skipped: N}}, got {state}"))?;
        Ok(())
    }
}

/// A scheduler that starts every process itself and says so in `JOB_ID`, `JOB_WORLD`,
/// `JOB_RANK`, `JOB_LOCAL_RANK` and `JOB_NODE` (and `JOB_HOST` for rank 0's address).
#[derive(Debug, Clone, Copy)]
pub struct RenamedElastic;

impl RenamedElastic {
    /// Name it is registered under.
    pub const NAME: &'static str = "renamed";
}

impl ClusterEnvironment for RenamedElastic {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn description(&self) -> &str {
        "example: a scheduler that sets JOB_ID, JOB_WORLD, JOB_RANK, JOB_LOCAL_RANK, JOB_NODE"
    }

    fn detect(&self, env: &Env) -> bool {
        env.contains_key("JOB_ID")
    }

    fn ranks(&self, env: &Env, _devices: usize, _nodes: usize) -> Result<Ranks, FlagError> {
        let required = |var: &str| {
            env_usize(env, var)?.ok_or_else(|| {
                let why = format!(
                    "the {} cluster environment needs {var} to be set",
                    Self::NAME
                );
                FlagError::new(var, "", why)
            })
        };
        let mut ranks = Ranks::new(
            required("JOB_WORLD")?,
            required("JOB_RANK")?,
            env_usize(env, "JOB_LOCAL_RANK")?.unwrap_or(0),
            env_usize(env, "JOB_NODE")?.unwrap_or(0),
        )
        .check("JOB_WORLD", "JOB_RANK")?;
        if let Some(host) = env.get("JOB_HOST") {
            ranks.main_address = host.clone();
        }
        Ok(ranks)
    }
}

/// Variable `var` as a rank or a count: `None` when it is unset, an error naming it when it is
/// not a non-negative integer.
fn env_usize(env: &Env, var: &str) -> Result<Option<usize>, FlagError> {
    let parse = |v: &String| {
        v.trim()
            .parse()
            .map_err(|_| FlagError::new(var, v, "expected a non-negative integer"))
    };
    env.get(var).map(parse).transpose()
}

/// A callback registered by name: at the end of every training epoch, rank 0 prints
/// `epoch_line: epoch E step S` and the current value of each metric it was given
/// (`--trainer.callbacks=[{class_path: EpochLine, init_args: {metrics: [train_loss]}}]`).
pub struct EpochLine {
    metrics: Vec<String>,
}

/// [`EpochLine`]'s `init_args`.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct EpochLineArgs {
    metrics: Vec<String>,
}

impl EpochLine {
    /// Name it is registered under.
    pub const NAME: &'static str = "epoch_line";

    /// The callback its `init_args` describe (`{}`: no metrics).
    pub fn from_args(args: &serde_json::Value) -> anyhow::Result<Self> {
        let args: EpochLineArgs = serde_json::from_value(args.clone())?;
        Ok(Self {
            metrics: args.metrics,
        })
    }
}

impl Callback for EpochLine {
    fn name(&self) -> &str {
        "EpochLine"
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let state = &ctx.state;
        if !state.is_global_zero {
            return Ok(());
        }
        let mut line = format!(
            "epoch_line: epoch {} step {}",
            state.epoch, state.global_step
        );
        for name in &self.metrics {
            match state.callback_metrics.get(name) {
                Some(value) => line.push_str(&format!(" {name} {value:.4}")),
                None => line.push_str(&format!(" {name} -")),
            }
        }
        eprintln!("{line}");
        Ok(())
    }
}

/// A callback registered by name that logs: at the end of every training epoch, the L2 norm
/// of all the model's float weights as `weight_norm`, through [`CallbackContext::log`] (so it
/// reaches every logger with the epoch, and `callback_metrics`).
pub struct WeightNorm;

impl WeightNorm {
    /// Name it is registered under.
    pub const NAME: &'static str = "weight_norm";

    /// The callback (it takes no `init_args`).
    pub fn from_args(_args: &serde_json::Value) -> anyhow::Result<Self> {
        Ok(Self)
    }
}

impl Callback for WeightNorm {
    fn name(&self) -> &str {
        "WeightNorm"
    }

    fn on_train_epoch_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        let squares = ctx.with_weights(|weights| {
            let mut sum = 0.0;
            for (_, data) in weights.to_host() {
                let values: Vec<f64> = data.convert_dtype(DType::F64).to_vec().unwrap_or_default();
                sum += values.iter().map(|v| v * v).sum::<f64>();
            }
            sum
        });
        if let Some(squares) = squares {
            ctx.log("weight_norm", squares.sqrt());
        }
        Ok(())
    }
}

/// A checkpoint IO registered by name that takes arguments: local files, each checkpoint also
/// copied into a mirror directory (`--trainer.plugins=[{class_path: mirrored, init_args: {dir:
/// /backup}}]`), atomically in both places.
pub struct Mirrored {
    mirror: PathBuf,
}

/// [`Mirrored`]'s `init_args`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirroredArgs {
    /// The directory every checkpoint is copied into (required).
    pub dir: PathBuf,
}

impl Mirrored {
    /// Name it is registered under.
    pub const NAME: &'static str = "mirrored";

    /// The checkpoint IO as the `init_args` in `plan` say: what its registered factory builds.
    pub fn from_plan(plan: &Plan) -> anyhow::Result<Self> {
        let args: MirroredArgs = plan.init_args(Self::NAME)?;
        std::fs::create_dir_all(&args.dir)?;
        Ok(Self { mirror: args.dir })
    }

    /// Where `path`'s copy goes.
    fn mirrored(&self, path: &Path) -> PathBuf {
        self.mirror.join(path.file_name().unwrap_or_default())
    }
}

impl CheckpointIO for Mirrored {
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
        LocalCheckpointIO.save(bytes, path)?;
        LocalCheckpointIO.save(bytes, &self.mirrored(path))
    }

    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
        LocalCheckpointIO.load(path)
    }

    /// Removes the local file only: the mirror keeps every checkpoint.
    fn remove(&self, path: &Path) -> anyhow::Result<()> {
        LocalCheckpointIO.remove(path)
    }
}

/// A logger registered by name: every metrics record as one JSON line in `metrics.jsonl` in the
/// run's version directory (`--trainer.logger=[csv, jsonl]`).
pub struct JsonLines {
    file: BufWriter<File>,
}

impl JsonLines {
    /// Name it is registered under.
    pub const NAME: &'static str = "jsonl";

    /// Creates `metrics.jsonl` in `dir`.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let file = File::create(dir.join("metrics.jsonl"))?;
        Ok(Self {
            file: BufWriter::new(file),
        })
    }
}

impl Logger for JsonLines {
    fn log_hyperparams(&mut self, _hparams: &serde_json::Value) -> anyhow::Result<()> {
        Ok(())
    }

    fn log_metrics(&mut self, metrics: &BTreeMap<String, f64>, step: u64) -> anyhow::Result<()> {
        let line = serde_json::json!({ "step": step, "metrics": metrics });
        writeln!(self.file, "{line}")?;
        Ok(())
    }

    fn save(&mut self) -> anyhow::Result<()> {
        self.file.flush()?;
        Ok(())
    }
}

/// docs/plugins.md's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/plugins.md")]
pub struct PluginsGuide;
