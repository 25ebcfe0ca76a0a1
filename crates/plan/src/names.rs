//! The built-in names a plan refers to, below every module that uses them (a `Plan` names its
//! strategy and cluster environment; strategies and environments check plans).

/// Name of the one-device strategy.
pub const SINGLE_DEVICE: &str = "single_device";
/// Name of the distributed data parallel strategy.
pub const DDP: &str = "ddp";
/// Name of the sharded data parallel strategy (optimizer state and gradients partitioned).
pub const DDP_SHARDED: &str = "ddp_sharded";
/// Name of the strategy that drives every device of a node from one process as one XLA SPMD
/// program.
pub const XLA: &str = "xla";
/// Name of the environment ember's own launcher (or a user setting `LOCAL_RANK` by hand) runs in.
pub const LOCAL: &str = "local";
