//! The process's PJRT clients and their compile cache, shared by every xla device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::clients::{Clients, Placement};
use super::device::XlaDevice;
use super::signature::Signature;
use super::template::{Bound, Template};
use crate::pjrt::{Api, Executable, plugin};

/// Counters of the compile cache and of where the backend's time goes, for tests,
/// benchmarks and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// Distinct programs compiled.
    pub compiles: usize,
    /// Segments that found their program already compiled.
    pub hits: usize,
    /// Segments lowered to StableHLO text: those whose structure had not been seen (a steady
    /// training step is lowered once, then found by its structure).
    pub lowerings: usize,
    /// Seconds spent in the plugin's compiler.
    pub compile_seconds: f64,
    /// Segments executed.
    pub executions: usize,
    /// Seconds spent starting programs: the plugin's execute call, which returns before the
    /// program has run.
    pub execute_seconds: f64,
    /// Seconds the host waited for the device: reading a value back (the programs that make it
    /// finish first, then the copy), a sync, or a program held back while the host was too far
    /// ahead (see `backend::in_flight`).
    pub wait_seconds: f64,
    /// Seconds spent recording ops as burn hands them over.
    pub record_seconds: f64,
    /// Seconds spent at cuts on the host, outside the compiler and the run: lowering the
    /// segment, looking its program up, uploading its scalars and gathering its arguments.
    pub prepare_seconds: f64,
}

/// Applies `op` to each counter of two readings (their sum, or what happened between them).
macro_rules! each_counter {
    ($a:expr, $b:expr, $op:tt) => {
        CacheStats {
            compiles: $a.compiles $op $b.compiles,
            hits: $a.hits $op $b.hits,
            lowerings: $a.lowerings $op $b.lowerings,
            compile_seconds: $a.compile_seconds $op $b.compile_seconds,
            executions: $a.executions $op $b.executions,
            execute_seconds: $a.execute_seconds $op $b.execute_seconds,
            wait_seconds: $a.wait_seconds $op $b.wait_seconds,
            record_seconds: $a.record_seconds $op $b.record_seconds,
            prepare_seconds: $a.prepare_seconds $op $b.prepare_seconds,
        }
    };
}

impl std::ops::Add for CacheStats {
    type Output = CacheStats;
    fn add(self, other: CacheStats) -> CacheStats {
        each_counter!(self, other, +)
    }
}

impl std::ops::Sub for CacheStats {
    type Output = CacheStats;
    /// What happened between an earlier reading (`other`) and this one.
    fn sub(self, other: CacheStats) -> CacheStats {
        each_counter!(self, other, -)
    }
}

/// The PJRT clients of this process and the programs compiled on them.
pub struct Runtime {
    clients: Clients,
    /// Programs by their text (a program over several devices names their count in its text,
    /// so the text also says which client it was compiled on).
    cache: Mutex<HashMap<String, Arc<Executable>>>,
    /// Lowered segments by the devices they run on and their structure.
    templates: Mutex<HashMap<usize, Templates>>,
    stats: Mutex<CacheStats>,
}

/// Lowered segments by their structure (signature bytes): a few per structure, for scalars
/// written into the program (booleans) that differ.
type Templates = HashMap<Vec<u8>, Vec<Arc<Template>>>;

/// Templates kept per segment structure; the oldest goes first.
const TEMPLATES_PER_STRUCTURE: usize = 4;

/// The process's one runtime (the PJRT plugin is loaded and its client made once, on first use):
/// a per-process cache, not a channel between modules.
static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The runtime, creating it on first use from the plugin [`plugin::find`] picks.
pub fn runtime() -> Result<&'static Runtime, String> {
    RUNTIME
        .get_or_init(|| {
            let path = plugin::find().map_err(|e| e.to_string())?;
            let api = Api::load(&path).map_err(|e| e.to_string())?;
            let clients = Clients::new(api).map_err(|e| format!("{e} ({})", path.display()))?;
            tracing::info!(
                plugin = %path.display(),
                platform = clients.platform(),
                devices = clients.device_count(),
                "xla: PJRT plugin ready"
            );
            Ok(Runtime {
                clients,
                cache: Mutex::new(HashMap::new()),
                templates: Mutex::new(HashMap::new()),
                stats: Mutex::new(CacheStats::default()),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

impl Runtime {
    /// The platform's name, e.g. `cpu`, `cuda`, `tpu`.
    pub fn platform(&self) -> &str {
        self.clients.platform()
    }

    /// The devices the plugin offers this process.
    pub fn device_count(&self) -> usize {
        self.clients.device_count()
    }

    /// The client `device`'s buffers and programs live on, and its first device there.
    pub fn placement(&'static self, device: &XlaDevice) -> Result<Placement, String> {
        self.clients.placement(device)
    }

    /// The executable for `text`, compiling it on a miss (for one device, or partitioned
    /// over `devices`); with the time the compile took (zero on a hit).
    pub fn executable(
        &'static self,
        text: &str,
        devices: usize,
    ) -> Result<(Arc<Executable>, Duration), String> {
        if let Some(exe) = self.cache.lock().expect("cache lock").get(text) {
            self.stats.lock().expect("stats lock").hits += 1;
            return Ok((exe.clone(), Duration::ZERO));
        }
        let start = Instant::now();
        let client = self.clients.for_span(devices)?;
        let compiled = match devices {
            1 => client.compile(text),
            n => client.compile_partitioned(text, n),
        };
        let exe = Arc::new(compiled.map_err(|e| {
            tracing::debug!("xla: the program that failed to compile:\n{text}");
            e.to_string()
        })?);
        let took = start.elapsed();
        self.record_compile(took);
        self.cache
            .lock()
            .expect("cache lock")
            .insert(text.to_owned(), exe.clone());
        Ok((exe, took))
    }

    /// Every program compiled so far, with its text: for tests and debugging (what a step
    /// lowered to, and with [`Executable::optimized_program`] what XLA made of it).
    pub fn programs(&self) -> Vec<(String, Arc<Executable>)> {
        let cache = self.cache.lock().expect("cache lock");
        cache.iter().map(|(t, e)| (t.clone(), e.clone())).collect()
    }

    /// The program of a segment lowered before with the structure of `sig`, applied to it.
    pub(crate) fn template(&self, sig: &Signature) -> Option<(Arc<Executable>, Bound)> {
        let found = {
            let templates = self.templates.lock().expect("template lock");
            templates
                .get(&sig.devices)?
                .get(&sig.bytes)?
                .iter()
                .find_map(|t| t.bind(sig).map(|bound| (t.exe.clone(), bound)))
        };
        if found.is_some() {
            self.stats.lock().expect("stats lock").hits += 1;
        }
        found
    }

    /// Counts a segment lowered.
    pub(crate) fn record_lowering(&self) {
        self.stats.lock().expect("stats lock").lowerings += 1;
    }

    /// Keeps a lowered segment for later segments of its structure.
    pub(crate) fn remember(&self, sig: Signature, template: Template) {
        let mut templates = self.templates.lock().expect("template lock");
        let kept = (templates.entry(sig.devices).or_default())
            .entry(sig.bytes)
            .or_default();
        if kept.len() == TEMPLATES_PER_STRUCTURE {
            kept.remove(0);
        }
        kept.push(Arc::new(template));
    }

    fn record_compile(&self, took: Duration) {
        let mut stats = self.stats.lock().expect("stats lock");
        stats.compiles += 1;
        stats.compile_seconds += took.as_secs_f64();
        tracing::debug!(
            seconds = took.as_secs_f64(),
            total = stats.compiles,
            "xla: compiled a program"
        );
    }

    /// Counts a cut that started a program: its host work outside the compiler, and the start.
    pub(crate) fn record_cut(&self, preparing: Duration, executing: Duration) {
        let mut stats = self.stats.lock().expect("stats lock");
        stats.executions += 1;
        stats.prepare_seconds += preparing.as_secs_f64();
        stats.execute_seconds += executing.as_secs_f64();
    }

    /// Counts time the host waited for the device.
    pub(crate) fn record_wait(&self, took: Duration) {
        self.stats.lock().expect("stats lock").wait_seconds += took.as_secs_f64();
    }

    /// Counts time spent recording ops.
    pub(crate) fn record_recording(&self, took: Duration) {
        self.stats.lock().expect("stats lock").record_seconds += took.as_secs_f64();
    }

    /// The cache's counters so far.
    pub fn stats(&self) -> CacheStats {
        *self.stats.lock().expect("stats lock")
    }
}

/// The cache's counters, zero before the runtime starts.
pub fn stats() -> CacheStats {
    match RUNTIME.get() {
        Some(Ok(rt)) => rt.stats(),
        _ => CacheStats::default(),
    }
}
