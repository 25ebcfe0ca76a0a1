//! Strategy names and what the connector needs to know about them.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::check::PlanCheck;
use crate::init_args::ArgsCheck;
use crate::plan::Plan;

/// A registered strategy: its name, a description, whether it runs many processes, and what
/// plans it refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StrategyInfo {
    /// Lowercase name, as selected with `--trainer.strategy`.
    pub name: String,
    /// One line for `--help`.
    pub description: String,
    /// Whether it runs on several devices (and may span nodes): one process per device, unless
    /// [`one_process_per_node`](Self::one_process_per_node).
    pub distributed: bool,
    /// Whether one process drives all of its node's devices ([`per_node`](Self::per_node)).
    pub one_process_per_node: bool,
    /// Its plan-time check ([`with_check`](Self::with_check)); `None` accepts every plan.
    #[serde(skip)]
    pub check: Option<PlanCheck>,
    /// The `init_args` it takes ([`with_args`](Self::with_args)); `None`: none.
    #[serde(skip)]
    pub args: Option<ArgsCheck>,
}

impl StrategyInfo {
    /// A strategy description.
    pub fn new(name: &str, description: &str, distributed: bool) -> Self {
        Self {
            name: name.to_ascii_lowercase(),
            description: description.to_owned(),
            distributed,
            one_process_per_node: false,
            check: None,
            args: None,
        }
    }

    /// One process per node drives all the node's devices (the `xla` strategy), instead of one
    /// process per device.
    pub fn per_node(mut self) -> Self {
        self.one_process_per_node = true;
        self
    }

    /// Refuses plans `check` returns `Err(why)` for: `--trainer.strategy=NAME` then exits 2
    /// with `why` while planning (`--print-plan` shows it), before any process starts.
    ///
    /// ```
    /// # use ember_plan::StrategyInfo;
    /// let info = StrategyInfo::new("local_sgd", "averages weights every 4 steps", true)
    ///     .with_check(|plan| match plan.world_size {
    ///         1 => Err("it averages weights over ranks; use --trainer.devices=2 or more".into()),
    ///         _ => Ok(()),
    ///     });
    /// ```
    pub fn with_check(mut self, check: impl Fn(&Plan) -> Result<(), String> + 'static) -> Self {
        self.check = Some(PlanCheck::new(check));
        self
    }

    /// Takes `init_args` that deserialize as `T`
    /// (`--trainer.strategy='{class_path: NAME, init_args: {...}}'`): arguments `T` refuses exit
    /// 2 naming the flag and the argument while planning; its factory reads them with
    /// [`Plan::init_args`]. Without this, `init_args` for it are refused.
    pub fn with_args<T: DeserializeOwned>(mut self) -> Self {
        self.args = Some(ArgsCheck::of::<T>());
        self
    }
}

pub use crate::names::{DDP, DDP_SHARDED, SINGLE_DEVICE, XLA};
