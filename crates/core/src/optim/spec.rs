//! The optimizer a run's config chooses (LightningCLI's `--optimizer` section), and the
//! `optimizer` and `lr_scheduler` sections read together: torch's class names and arguments,
//! read into burn's built-in optimizers ([`AnyOptimizer`]; the schedulers are in
//! `schedulers.rs`).

use super::AdamConfig;
use burn::module::AutodiffModule;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamWConfig, SgdConfig};
use burn::tensor::backend::AutodiffBackend;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::any::{AnyOptimizer, AnyScheduler};
use super::schedulers::{SchedulerInterval, SchedulerSpec};
use crate::error::{FlagError, PlanResult, render};

/// An optimizer by torch's class name, with torch's arguments and defaults:
/// `{class_path: AdamW, init_args: {lr: 0.001, weight_decay: 0.01}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "class_path", content = "init_args")]
pub enum OptimizerSpec {
    /// torch's `Adam`: burn's Adam, its weight decay an L2 penalty on the gradient.
    Adam(AdamArgs),
    /// torch's `AdamW`: burn's AdamW (decoupled weight decay).
    AdamW(AdamArgs),
    /// torch's `SGD`: burn's SGD, with momentum when `momentum` is above 0.
    #[serde(rename = "SGD")]
    Sgd(SgdArgs),
}

/// Adam's and AdamW's arguments, as torch names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamArgs {
    /// The learning rate (the scheduler's starting rate).
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// The moments' decay rates.
    #[serde(default = "default_betas")]
    pub betas: (f32, f32),
    /// Added to the denominator for numerical stability.
    #[serde(default = "default_eps")]
    pub eps: f32,
    /// Adam: the L2 penalty; AdamW: the decoupled decay (torch's default: 0 for Adam, 0.01
    /// for AdamW; read as 0 here when missing from Adam's table).
    #[serde(default)]
    pub weight_decay: Option<f32>,
    /// AMSGrad's running maximum of the second moment.
    #[serde(default)]
    pub amsgrad: bool,
}

/// SGD's arguments, as torch names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SgdArgs {
    /// The learning rate (the scheduler's starting rate).
    #[serde(default = "default_lr")]
    pub lr: f64,
    /// Momentum factor; 0 for none.
    #[serde(default)]
    pub momentum: f64,
    /// Dampening for momentum.
    #[serde(default)]
    pub dampening: f64,
    /// The L2 penalty.
    #[serde(default)]
    pub weight_decay: f32,
    /// Nesterov momentum.
    #[serde(default)]
    pub nesterov: bool,
}

impl Default for AdamArgs {
    /// torch's defaults.
    fn default() -> Self {
        Self {
            lr: default_lr(),
            betas: default_betas(),
            eps: default_eps(),
            weight_decay: None,
            amsgrad: false,
        }
    }
}

impl Default for SgdArgs {
    /// torch's defaults.
    fn default() -> Self {
        Self {
            lr: default_lr(),
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

fn default_lr() -> f64 {
    1e-3
}

fn default_betas() -> (f32, f32) {
    (0.9, 0.999)
}

fn default_eps() -> f32 {
    1e-8
}

impl OptimizerSpec {
    /// The learning rate it starts from.
    pub fn lr(&self) -> f64 {
        match self {
            Self::Adam(args) | Self::AdamW(args) => args.lr,
            Self::Sgd(args) => args.lr,
        }
    }

    /// Refuses arguments burn's optimizers cannot take (naming the argument).
    pub fn check(&self) -> PlanResult<()> {
        let lr = self.lr();
        if !(lr.is_finite() && lr > 0.0) {
            return Err(bad("--optimizer.init_args.lr", lr, "a number > 0"));
        }
        match self {
            Self::Adam(args) | Self::AdamW(args) => {
                let (b1, b2) = args.betas;
                if !(0.0..1.0).contains(&b1) || !(0.0..1.0).contains(&b2) {
                    let shown = format!("[{b1}, {b2}]");
                    return Err(bad(
                        "--optimizer.init_args.betas",
                        shown,
                        "two numbers in [0, 1)",
                    ));
                }
                if !(args.eps.is_finite() && args.eps > 0.0) {
                    return Err(bad("--optimizer.init_args.eps", args.eps, "a number > 0"));
                }
            }
            Self::Sgd(args) => {
                if args.nesterov && (args.momentum <= 0.0 || args.dampening != 0.0) {
                    return Err(bad(
                        "--optimizer.init_args.nesterov",
                        true,
                        "Nesterov momentum needs momentum > 0 and dampening 0",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The optimizer for module `M` on backend `B`.
    pub fn init<M: AutodiffModule<B>, B: AutodiffBackend>(&self) -> AnyOptimizer<M, B> {
        match self {
            Self::Adam(a) => {
                let decay = a.weight_decay.filter(|&d| d != 0.0);
                let config = AdamConfig::new()
                    .with_beta_1(a.betas.0)
                    .with_beta_2(a.betas.1)
                    .with_epsilon(a.eps)
                    .with_amsgrad(a.amsgrad)
                    .with_weight_decay(decay.map(WeightDecayConfig::new));
                AnyOptimizer::Adam(config.init())
            }
            Self::AdamW(a) => {
                let config = AdamWConfig::new()
                    .with_beta_1(a.betas.0)
                    .with_beta_2(a.betas.1)
                    .with_epsilon(a.eps)
                    .with_amsgrad(a.amsgrad)
                    .with_weight_decay(a.weight_decay.unwrap_or(0.01));
                AnyOptimizer::AdamW(config.init())
            }
            Self::Sgd(s) => {
                let momentum = (s.momentum != 0.0).then_some(MomentumConfig {
                    momentum: s.momentum,
                    dampening: s.dampening,
                    nesterov: s.nesterov,
                });
                let decay = (s.weight_decay != 0.0).then(|| WeightDecayConfig::new(s.weight_decay));
                let config = SgdConfig::new()
                    .with_momentum(momentum)
                    .with_weight_decay(decay);
                AnyOptimizer::Sgd(config.init())
            }
        }
    }
}

/// The `optimizer` and `lr_scheduler` sections of a run's config; `None` where the config
/// has none (the model's own choice stands).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OptimizerSections {
    /// `optimizer`.
    pub optimizer: Option<OptimizerSpec>,
    /// `lr_scheduler`.
    pub lr_scheduler: Option<SchedulerSpec>,
}

impl OptimizerSections {
    /// Reads the sections of a merged config: each `null`, a class name (`AdamW`), or a
    /// table of `class_path` and `init_args`; keys beside `class_path` (`--optimizer.lr=0.1`)
    /// are init arguments, as LightningCLI reads them. The scheduler is checked with the
    /// optimizer's rate when the config names an optimizer (else when the model configures).
    pub fn from_config(merged: &Value) -> PlanResult<Self> {
        let optimizer: Option<OptimizerSpec> = read(merged, "optimizer", &[])?;
        if let Some(spec) = &optimizer {
            spec.check()?;
        }
        let lr_scheduler: Option<SchedulerSpec> = read(merged, "lr_scheduler", &["interval"])?;
        let sections = Self {
            optimizer,
            lr_scheduler,
        };
        // Without an optimizer section the rate is the model's, known once it configures.
        if let Some(spec) = &sections.optimizer {
            sections.scheduler_for(spec.lr())?;
        }
        Ok(sections)
    }

    /// Whether the config chose either.
    pub fn any(&self) -> bool {
        self.optimizer.is_some() || self.lr_scheduler.is_some()
    }

    /// The scheduler, starting from `lr` (the optimizer's rate): the configured one, or a
    /// constant `lr`; burn's refusal names the section.
    pub fn scheduler_for(&self, lr: f64) -> PlanResult<(AnyScheduler, SchedulerInterval)> {
        let lr = self.optimizer.as_ref().map_or(lr, OptimizerSpec::lr);
        match &self.lr_scheduler {
            None => Ok((AnyScheduler::Constant(lr), SchedulerInterval::Step)),
            Some(spec) => {
                let made = spec.init(lr).map_err(|why| {
                    let shown = serde_json::to_value(spec).map(|v| render(&v));
                    FlagError::new("--lr_scheduler", shown.unwrap_or_default(), why)
                })?;
                Ok((made, spec.interval))
            }
        }
    }
}

/// Section `name` of `merged` as `T`: `null` is none, a string is a class name, and keys of a
/// table other than `class_path`, `init_args` and `siblings` go into `init_args`.
fn read<T: DeserializeOwned>(
    merged: &Value,
    name: &str,
    siblings: &[&str],
) -> PlanResult<Option<T>> {
    let flag = format!("--{name}");
    let value = match merged.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(class)) => serde_json::json!({"class_path": class, "init_args": {}}),
        Some(Value::Object(table)) => {
            let mut args = match table.get("init_args") {
                None => Map::new(),
                Some(Value::Object(args)) => args.clone(),
                Some(other) => {
                    let allowed = "a table of the class's arguments";
                    return Err(FlagError::new(
                        format!("{flag}.init_args"),
                        render(other),
                        allowed,
                    ));
                }
            };
            let mut normal = Map::new();
            for (key, v) in table {
                match key.as_str() {
                    "init_args" => {}
                    k if k == "class_path" || siblings.contains(&k) => {
                        normal.insert(key.clone(), v.clone());
                    }
                    _ => {
                        args.insert(key.clone(), v.clone());
                    }
                }
            }
            if !normal.contains_key("class_path") {
                return Err(FlagError::new(
                    flag,
                    render(&Value::Object(table.clone())),
                    format!(
                        "name the class first: --{name}=CLASS (then --{name}.KEY=VALUE for its arguments)"
                    ),
                ));
            }
            normal.insert("init_args".into(), Value::Object(args));
            Value::Object(normal)
        }
        Some(other) => {
            return Err(FlagError::new(
                flag,
                render(other),
                "a class name or a {class_path, init_args} table",
            ));
        }
    };
    serde_json::from_value(value.clone())
        .map(Some)
        .map_err(|e| FlagError::new(flag, render(&value), e.to_string()))
}

fn bad(flag: &str, value: impl ToString, allowed: &str) -> FlagError {
    FlagError::new(flag, value.to_string(), allowed)
}

#[cfg(test)]
mod tests {
    use burn::optim::lr_scheduler::LrScheduler;
    use serde_json::json;

    use super::*;

    fn sections(value: Value) -> PlanResult<OptimizerSections> {
        OptimizerSections::from_config(&value)
    }

    #[test]
    fn a_class_name_a_table_and_loose_keys_read_alike_with_torchs_defaults() {
        let by_name = sections(json!({"optimizer": "AdamW"})).unwrap();
        let table = json!({"optimizer": {"class_path": "AdamW", "init_args": {}}});
        assert_eq!(sections(table).unwrap(), by_name);
        let Some(OptimizerSpec::AdamW(args)) = by_name.optimizer else {
            panic!("{by_name:?}")
        };
        assert_eq!(args, AdamArgs::default());
        assert_eq!((args.lr, args.betas, args.eps), (1e-3, (0.9, 0.999), 1e-8));
        let loose =
            json!({"optimizer": {"class_path": "SGD", "lr": 0.5, "init_args": {"momentum": 0.9}}});
        let Some(OptimizerSpec::Sgd(sgd)) = sections(loose).unwrap().optimizer else {
            panic!()
        };
        assert_eq!((sgd.lr, sgd.momentum, sgd.dampening), (0.5, 0.9, 0.0));
        assert_eq!(
            sections(json!({"optimizer": null})).unwrap(),
            OptimizerSections::default()
        );
    }

    #[test]
    fn refusals_name_the_section() {
        for (value, flag) in [
            (json!({"optimizer": "Nadam"}), "--optimizer"),
            (json!({"optimizer": {"lr": 0.1}}), "--optimizer"),
            (json!({"optimizer": 3}), "--optimizer"),
            (
                json!({"optimizer": {"class_path": "SGD", "init_args": 3}}),
                "--optimizer.init_args",
            ),
            (
                json!({"optimizer": {"class_path": "SGD", "init_args": {"lr": 0}}}),
                "--optimizer.init_args.lr",
            ),
            (
                json!({"optimizer": {"class_path": "SGD", "nesterov": true}}),
                "--optimizer.init_args.nesterov",
            ),
            (
                json!({"lr_scheduler": {"class_path": "CosineAnnealingLR"}}),
                "--lr_scheduler",
            ),
            (
                json!({"optimizer": "SGD", "lr_scheduler": {"class_path": "StepLR", "step_size": 0}}),
                "--lr_scheduler",
            ),
        ] {
            let err = sections(value.clone()).unwrap_err();
            assert_eq!(err.flag, flag, "{value}: {err}");
        }
    }

    /// The rates a scheduler gives from `lr` 0.1 at its first `n` steps.
    fn rates(kind: Value, n: usize) -> Vec<f64> {
        let read = sections(json!({"lr_scheduler": kind})).unwrap();
        let (mut scheduler, interval) = read.scheduler_for(0.1).unwrap();
        assert_eq!(interval, read.lr_scheduler.as_ref().unwrap().interval);
        (0..n)
            .map(|_| (scheduler.step() * 1e9).round() / 1e9)
            .collect()
    }

    /// torch's formulas: each scheduler's first rates, as torch's scheduler gives them epoch by
    /// epoch.
    #[test]
    fn schedulers_follow_torchs_formulas_from_the_optimizers_rate() {
        let step = json!({"class_path": "StepLR", "step_size": 2, "gamma": 0.5});
        assert_eq!(rates(step, 5), [0.1, 0.1, 0.05, 0.05, 0.025]);
        let exponential = json!({"class_path": "ExponentialLR", "gamma": 0.5});
        assert_eq!(rates(exponential, 3), [0.1, 0.05, 0.025]);
        let cosine = json!({"class_path": "CosineAnnealingLR", "T_max": 2, "eta_min": 0.02});
        assert_eq!(rates(cosine, 3), [0.1, 0.06, 0.02]);
        let linear = json!({"class_path": "LinearLR", "start_factor": 0.5, "total_iters": 2});
        assert_eq!(rates(linear, 4), [0.05, 0.075, 0.1, 0.1]);
        assert_eq!(
            rates(
                json!({"class_path": "StepLR", "step_size": 1, "interval": "step"}),
                2
            ),
            [0.1, 0.01]
        );
        let none = OptimizerSections::default();
        let (mut constant, interval) = none.scheduler_for(0.3).unwrap();
        assert_eq!(
            (constant.step(), constant.step(), interval),
            (0.3, 0.3, SchedulerInterval::Step)
        );
    }
}
