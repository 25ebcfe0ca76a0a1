//! The Trainer's loop options (`--trainer.max_steps=100`, `--trainer.callbacks=[...]`, ...).
//!
//! They share the `trainer` config section with the plan keys of [`crate::flags`]. Each option
//! is declared once, in the table below: its doc (the docs table's meaning column), its field
//! type, its default, the [`Kind`] that parses and writes it, and its `--help` line. The
//! struct, `Default`, parsing, serialisation, `--help` and the docs table all come from that
//! table; a rejection names the flag, the value and what the kind allows.

mod batch_size_find;
mod callbacks;
mod duration;
mod lr_find;
mod settings;
mod values;

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{FlagError, PlanResult, render};
pub use batch_size_find::{BatchSizeFind, BatchSizeFindChoice, ScaleMode};
pub use callbacks::{CallbackSpec, Callbacks, callback_key, unknown_callback};
pub use duration::{MaxTime, duration_text, parse_duration, write_duration};
pub use lr_find::{LrFind, LrFindChoice, SweepMode};
pub use values::{
    CheckpointWrites, ClipAlgorithm, Count, CountOrNull, DEFAULT_LOGGER, Directory, EpochLimit,
    FileOrNull, Flag, FlagOrCount, FlagOrNull, Interval, Kind, Limit, LoggerNames, Megabytes,
    Positive, PositiveOrNull, ProfilerChoice, ProfilerKind, SanitySteps, Seconds, StepLimit,
    ThresholdOrNull, is_logger_flag, logger_key, unknown_logger,
};

/// One loop option as `--help` and the docs show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionInfo {
    /// The key under `trainer` (`max_epochs`).
    pub key: &'static str,
    /// One line for `--help`, without the default.
    pub help: &'static str,
    /// What it means, for the docs table (the field's doc comment).
    pub doc: &'static str,
    /// The default as shown when it is not simply the written default value.
    pub shown_default: Option<&'static str>,
}

/// Declares a table of `trainer` keys: each entry becomes a field of the struct, its default, a
/// parse arm (`set`), a serialised entry (`to_value`) and an [`OptionInfo`] in the list named
/// after the struct; `setters with` adds a builder method per key (`setters none`: none). The loop options below and the
/// plan keys of [`crate::flags`] are both declared with it.
macro_rules! options_table {
    (
        $(#[doc = $sdoc:literal])+
        struct $name:ident { $($(#[doc = $xdoc:literal])* $xkey:ident: $xty:ty = $xdefault:expr,)* }
        infos $infos:ident;
        setters $setters:ident;
        $($entries:tt)+
    ) => {
        options_table!(
            @table [$(#[doc = $sdoc])+] $name [$($(#[doc = $xdoc])* $xkey: $xty = $xdefault,)*]
            $infos; $($entries)+
        );
        options_table!(@setters $setters $name; $($entries)+);
    };
    (
        @table [$(#[doc = $sdoc:literal])+] $name:ident
        [$($(#[doc = $xdoc:literal])* $xkey:ident: $xty:ty = $xdefault:expr,)*]
        $infos:ident;
        $(
            $(#[doc = $doc:literal])+
            $key:ident: $ty:ty = $default:expr, $kind:ty, $help:literal $(, shown $shown:literal)?;
        )+
    ) => {
        $(#[doc = $sdoc])+
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[doc = $doc])+ pub $key: $ty, )+
            $( $(#[doc = $xdoc])* pub $xkey: $xty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $key: $default, )+ $( $xkey: $xdefault, )* }
            }
        }

        #[doc = concat!("Every key of [`", stringify!($name), "`], in `--help` order.")]
        pub const $infos: &[OptionInfo] = &[$(
            OptionInfo {
                key: stringify!($key),
                help: $help,
                doc: concat!($($doc),+),
                shown_default: options_table!(@shown $($shown)?),
            },
        )+];

        impl $name {
            /// Sets one key from its config value; an unknown key is an error.
            pub fn set(&mut self, key: &str, value: &Value) -> PlanResult<()> {
                let rejected = |allowed: String| {
                    FlagError::new(format!("--trainer.{key}"), render(value), allowed)
                };
                match key {
                    $( stringify!($key) => self.$key = <$kind>::parse(value).map_err(rejected)?, )+
                    _ => return Err(rejected(format!("not a key of {}", stringify!($name)))),
                }
                Ok(())
            }

            /// The keys as entries of the `trainer` config section, those of the tables it
            /// holds after its own.
            pub fn to_value(&self) -> Map<String, Value> {
                let mut map = Map::new();
                $( map.insert(stringify!($key).to_owned(), <$kind>::write(&self.$key)); )+
                $( map.extend(self.$xkey.to_value()); )*
                map
            }
        }
    };
    (
        @setters with $name:ident;
        $(
            $(#[doc = $doc:literal])+
            $key:ident: $ty:ty = $default:expr, $kind:ty, $help:literal $(, shown $shown:literal)?;
        )+
    ) => {
        impl $name {
            $(
                #[doc = concat!("Sets `", stringify!($key), "`:")]
                $(#[doc = $doc])+
                pub fn $key(mut self, value: impl Into<$ty>) -> Self {
                    self.$key = value.into();
                    self
                }
            )+
        }
    };
    (@setters none $name:ident; $($entries:tt)+) => {};
    (@shown $shown:literal) => { Some($shown) };
    (@shown) => { None };
}

pub(crate) use options_table;

options_table! {
    /// Loop options, resolved from the `trainer` section.
    struct TrainerOptions {}
    infos OPTIONS;
    setters none;
    /// Epochs to train; `-1`: no epoch limit; `0`: train nothing. Unset: no epoch limit when
    /// `max_steps` is set, else 1000.
    max_epochs: Option<u64> = None, EpochLimit,
        "stop after this many epochs; -1 for no limit", shown "the app's, else 1000";
    /// Epochs before early stopping may stop the run.
    min_epochs: u64 = 0, Count,
        "train at least this many epochs before early stopping may stop";
    /// Optimizer steps at most; `-1`: no limit; `0`: train nothing.
    max_steps: Option<u64> = None, StepLimit,
        "stop after this many optimizer steps; -1 for no limit";
    /// Optimizer steps before early stopping may stop the run; `null`: none.
    min_steps: Option<u64> = None, CountOrNull,
        "train at least this many optimizer steps before early stopping may stop";
    /// Training time at most (Lightning's `max_time`): `DD:HH:MM:SS` or a table of `days`,
    /// `hours`, `minutes`, `seconds`; `fit` checks it after every training batch and, once
    /// spent, stops as early stopping does (a checkpoint at the stop; time spent before a
    /// resume counts). It adds a `Timer` callback unless `callbacks` has one. `null`: no limit.
    max_time: Option<std::time::Duration> = None, MaxTime,
        "stop fit after this much training time: DD:HH:MM:SS or {days, hours, minutes, seconds}; null for none";
    /// Training batches per epoch: an integer (batches) or a fraction in [0, 1] (a non-zero
    /// fraction keeps at least one batch).
    limit_train_batches: Limit = Limit::Fraction(1.0), Limit,
        "batches per training epoch: a count, or a fraction in [0, 1]";
    /// Validation batches per pass, as `limit_train_batches`.
    limit_val_batches: Limit = Limit::Fraction(1.0), Limit,
        "batches per validation pass: a count or a fraction";
    /// Test batches per pass, as `limit_train_batches`.
    limit_test_batches: Limit = Limit::Fraction(1.0), Limit,
        "batches per test pass: a count or a fraction";
    /// Predict batches, as `limit_train_batches`.
    limit_predict_batches: Limit = Limit::Fraction(1.0), Limit,
        "batches to predict: a count or a fraction";
    /// `predict` returns the predictions (the command line prints them); `false`: they are
    /// only handed to the callbacks as they are made (a `PredictionWriter` writes them), so
    /// memory holds a batch's, and `predict` returns an empty list per loader.
    return_predictions: bool = true, Flag,
        "predict: return (print) the predictions; false to leave them to a PredictionWriter";
    /// Validate every N training batches, or every fraction of an epoch.
    val_check_interval: Limit = Limit::Fraction(1.0), Interval,
        "validate every N training batches, or every fraction of an epoch";
    /// Validate in every Nth epoch; `null`: count `val_check_interval` batches across epochs
    /// (which must then be a number of batches).
    check_val_every_n_epoch: Option<u64> = Some(1), PositiveOrNull,
        "validate every N epochs; null to validate only by val_check_interval batches";
    /// `fit`: ask the data module for its train and val loaders again every N epochs (after
    /// `DataModule::set_epoch` with the epoch), Lightning's option of that name; `0`: once.
    reload_dataloaders_every_n_epochs: u64 = 0, Count,
        "fit: make the train and val loaders again every N epochs; 0 for once";
    /// Validation batches before training (not logged, not seen by callbacks that check
    /// `sanity_checking`); `-1`: all.
    num_sanity_val_steps: Option<u64> = Some(2), SanitySteps,
        "validation batches run before training; -1 for all";
    /// `true` or N: N batches of train and val, one epoch, no loggers, no checkpoints
    /// (0: off).
    fast_dev_run: u64 = 0, FlagOrCount,
        "true or N: run N batches of each loop once, with no logging or checkpoints";
    /// Train (unshuffled) and validate on this many, or this fraction of, training batches.
    overfit_batches: Limit = Limit::Batches(0), Limit,
        "train and validate on this many (or this fraction of) training batches, unshuffled";
    /// Seeds the backend (weights, dropout) and the shuffles; `null` draws one. burn-flex's
    /// generator is one per process, so Trainers on different threads must not seed and
    /// initialise at the same time.
    seed: Option<u64> = None, CountOrNull,
        "seed for weights, shuffling and dropout; null draws one", shown "the app's";
    /// Batches per optimizer step; each loss is divided by it, so k batches of a mean loss
    /// equal one batch k times larger.
    accumulate_grad_batches: u64 = 1, Positive,
        "batches whose gradients are summed per optimizer step";
    /// Clip gradients at this value after accumulation, before the optimizer step; `null`:
    /// no clipping.
    gradient_clip_val: Option<f64> = None, ThresholdOrNull,
        "clip gradients at this value; null for none";
    /// `norm` bounds the global L2 norm of all gradients (coefficient kept on the device, so
    /// no host sync); `value` clamps each element.
    gradient_clip_algorithm: ClipAlgorithm = ClipAlgorithm::Norm, ClipAlgorithm,
        "norm (global L2 norm) or value (each element)";
    /// Step metrics are written every N optimizer steps.
    log_every_n_steps: u64 = 50, Positive,
        "write step metrics every N optimizer steps";
    /// A bar per epoch on a terminal; a line per epoch otherwise.
    enable_progress_bar: bool = true, Flag,
        "show a progress bar on a terminal";
    /// Print the model summary when `fit` starts (rank 0, to stderr): each top-level
    /// module's name, type and parameter count, trainable and frozen totals, and the
    /// parameters' size in the dtypes they are stored in.
    enable_model_summary: bool = true, Flag,
        "print the model's modules and parameter counts when fit starts";
    /// Time the run's phases (data fetch, training step, backward, gradient reduction,
    /// optimizer step, validation, checkpoints, callbacks, loggers), with the device
    /// synchronised at each phase's start and end: `simple` prints a table at the end of each
    /// entry point (rank 0, to stderr), `advanced` writes a Chrome trace per rank
    /// (`trace-<stage>-rank<N>.json` in the log directory). Off (`null`): no cost.
    profiler: Option<ProfilerKind> = None, ProfilerChoice,
        "simple (a table of where the time went) or advanced (a Chrome trace per rank); null for none";
    /// Before `fit`, Lightning's learning-rate range test on a copy of the model: `num_training`
    /// optimizer steps at rates rising from `min_lr` to `max_lr`, stopped when the smoothed loss
    /// diverges; the rate of the loss's steepest descent goes into the model's hyperparameters
    /// (`model.lr`) for the fit, which then starts from the model's own weights. `true` for
    /// Lightning's settings, or a table of them (docs/trainer.md).
    lr_find: Option<LrFind> = None, LrFindChoice,
        "find the learning rate before fit (true, or a table of settings) and use it";
    /// Before `fit` (one process, through the CLI), Lightning's batch-size scaling: sizes from
    /// `init_val` doubled (then, with `mode: binsearch`, bisected) while a trial of
    /// `steps_per_trial` steps fits, each trial a child process (so a GPU's out-of-memory abort
    /// ends only the trial) whose peak resident memory must stay within `memory_share` of what
    /// was available; the largest size that fits goes into `data.batch_size` for the fit.
    batch_size_find: Option<BatchSizeFind> = None, BatchSizeFindChoice,
        "find the largest batch size that fits before fit (true, or a table of settings) and use it";
    /// Add a default ModelCheckpoint when `callbacks` has none.
    enable_checkpointing: bool = true, Flag,
        "add a ModelCheckpoint when callbacks has none";
    /// Where `lightning_logs/` and checkpoints go.
    default_root_dir: PathBuf = PathBuf::from("."), Directory,
        "where logs and checkpoints go", shown "the working directory";
    /// `true` (csv), `false` (no files), `csv`, `tensorboard`, `mlflow` (a tracking server:
    /// `MLFLOW_TRACKING_URI`), a logger the program registered, or a list of them.
    logger: Vec<String> = vec![DEFAULT_LOGGER.to_owned()], LoggerNames,
        "true (csv), false, or a list of csv, tensorboard, mlflow and registered loggers", shown "[csv]";
    /// A list: callback names, or `{class_path, init_args}` tables.
    callbacks: Vec<CallbackSpec> = Vec::new(), Callbacks,
        "a list of callbacks: names, or {class_path, init_args} tables";
    /// `fit`: resume from this checkpoint; `validate`/`test`/`predict`: load its weights. A
    /// path, `last` (the checkpoint with the most steps in the run's checkpoint directories;
    /// none yet: nothing is loaded, with a notice, as in Lightning) or `best` (the best one
    /// the newest checkpoint's ModelCheckpoint recorded).
    ckpt_path: Option<PathBuf> = None, FileOrNull,
        "a checkpoint fit resumes from, or whose weights validate/test/predict use: a path, last or best";
    /// `async`: checkpoints are encoded and written through the checkpoint IO (local files, or
    /// a registered or given one) on a background thread while training goes on (a failed
    /// write fails the run at the next step; every entry point waits for the last write);
    /// `sync`: on the loop's thread, as Lightning's default does.
    checkpoint_writes: CheckpointWrites = CheckpointWrites::Async, CheckpointWrites,
        "async (encode and write checkpoints on a background thread), or sync";
    /// ddp: megabytes of gradients per all-reduce (docs/distributed.md).
    ddp_bucket_cap_mb: f64 = 25.0, Megabytes,
        "ddp: megabytes of gradients per all-reduce";
    /// ddp: average the tensors that take no gradient (batch-norm running statistics) over
    /// the ranks after every optimizer step, so every rank evaluates and checkpoints the same
    /// statistics. Unlike torch's SyncBatchNorm, the batch statistics a training step
    /// normalises with stay each rank's own (docs/distributed.md).
    sync_batchnorm: bool = false, Flag,
        "ddp: average batch-norm running statistics over the ranks after every optimizer step";
    /// ddp: seconds a collective may wait for the other ranks before the run fails.
    ddp_timeout: f64 = 1800.0, Seconds,
        "ddp: seconds a collective may wait for the other ranks before the run fails";
    /// Local launcher (`--trainer.devices=N` on one machine): when a rank fails, stop every
    /// rank and start them again from the last checkpoint (`--trainer.ckpt_path=last`), at most
    /// this many times, as torchrun's `--max-restarts` (docs/distributed.md).
    max_restarts: u64 = 0, Count,
        "local launcher: restart every rank from the last checkpoint when one fails, at most this many times";
    /// SLURM (Lightning's `SLURMEnvironment(auto_requeue=True)`): on SIGUSR1, the signal
    /// `#SBATCH --signal=USR1@SECONDS` sends before the time limit, every rank stops after its
    /// step, rank 0 writes a checkpoint and requeues the job (`scontrol requeue`), whose script
    /// then resumes with `--trainer.ckpt_path=last`. `false`: SIGUSR1 only stops the run.
    auto_requeue: bool = true, Flag,
        "SLURM: on SIGUSR1, save a checkpoint and requeue the job (scontrol requeue)";
}

/// Whether `key` is a loop option.
pub fn is_option_key(key: &str) -> bool {
    OPTIONS.iter().any(|o| o.key == key)
}

impl OptionInfo {
    /// The default as `--help` and the docs show it, given the defaults as config entries
    /// (`TrainerOptions::default().to_value()`, made once for all options).
    pub fn default_text(&self, defaults: &Map<String, Value>) -> String {
        match self.shown_default {
            Some(text) => text.to_owned(),
            None => defaults.get(self.key).map(render).unwrap_or_default(),
        }
    }

    /// The `--help` line, default included.
    pub fn help_line(&self, defaults: &Map<String, Value>) -> String {
        format!("{} [default: {}]", self.help, self.default_text(defaults))
    }
}

/// Every loop option with its `--help` line, in `--help` order.
pub fn help_lines() -> impl Iterator<Item = (&'static str, String)> {
    let defaults = TrainerOptions::default().to_value();
    OPTIONS.iter().map(move |o| (o.key, o.help_line(&defaults)))
}

impl TrainerOptions {
    /// Refuses combinations of options that each are valid alone: a fraction of an epoch as
    /// `val_check_interval` when `check_val_every_n_epoch` is null (there is no epoch for it to
    /// be a fraction of), as Lightning does.
    pub fn check(&self) -> PlanResult<()> {
        match (self.check_val_every_n_epoch, self.val_check_interval) {
            (None, Limit::Fraction(f)) if f != 1.0 => Err(FlagError::new(
                "--trainer.val_check_interval",
                f.to_string(),
                "a number of batches when check_val_every_n_epoch is null (a fraction needs an epoch to be a fraction of)",
            )),
            _ => Ok(()),
        }
    }

    /// Epochs the fit loop may run at most (Lightning's 1000 when nothing bounds it).
    pub fn epoch_limit(&self) -> u64 {
        match (self.max_epochs, self.max_steps) {
            (Some(e), _) => e,
            (None, Some(_)) => u64::MAX,
            (None, None) => 1000,
        }
    }

    /// The docs table of the loop options (`docs/trainer.md` holds a copy a test keeps equal).
    pub fn markdown_table() -> String {
        let defaults = TrainerOptions::default().to_value();
        let mut table = String::from("| key | meaning | default |\n| --- | --- | --- |\n");
        for option in OPTIONS {
            let doc = option.doc.split_whitespace().collect::<Vec<_>>().join(" ");
            table.push_str(&format!(
                "| `{}` | {doc} | {} |\n",
                option.key,
                option.default_text(&defaults)
            ));
        }
        table
    }
}

/// Reads a callback's `init_args` into its settings type; unknown or mistyped keys name the
/// callback and the flag.
pub fn init_args<T: DeserializeOwned>(class_path: &str, args: &Value) -> PlanResult<T> {
    serde_json::from_value(args.clone()).map_err(|e| {
        FlagError::new(
            "--trainer.callbacks",
            render(args),
            format!("bad init_args for {class_path}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests;
