//! The Trainer's extension points besides accelerators: strategies, precision plugins and
//! checkpoint IO (cluster environments live with the plan, in [`crate::cluster`]).
//!
//! Each is a trait a user can implement outside ember and either register by name (then it is
//! selectable from the command line) or hand to the Trainer's builder. Those registered by name,
//! ember's own included, are [`Plugins`](crate::registered::Plugins); the registry passes them to
//! the job in its [`RunContext`](crate::context::RunContext), from which the Trainer builds
//! what the plan names. See `docs/plugins.md`.

pub mod access;
pub mod ddp;
pub mod ddp_sharded;
pub mod device_reduce;
pub mod dtype;
pub mod grads;
pub(crate) mod lockstep;
pub mod precision;
pub(crate) mod reduce;
pub mod scaler;
pub mod shard;
pub mod strategy;
pub mod weights;
pub mod xla_strategy;
