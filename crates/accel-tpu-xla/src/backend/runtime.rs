//! The process's PJRT client and its compile cache, shared by every xla device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::pjrt::{Api, Client, Executable, plugin};

/// Counters of the compile cache, for tests, benchmarks and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// Distinct programs compiled.
    pub compiles: usize,
    /// Segments that found their program already compiled.
    pub hits: usize,
    /// Seconds spent in the plugin's compiler.
    pub compile_seconds: f64,
    /// Segments executed.
    pub executions: usize,
}

/// The PJRT client of this process and the programs compiled on it.
pub struct Runtime {
    client: Client,
    cache: Mutex<HashMap<String, Arc<Executable>>>,
    stats: Mutex<CacheStats>,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The runtime, creating it on first use from the plugin [`plugin::find`] picks.
pub fn runtime() -> Result<&'static Runtime, String> {
    RUNTIME
        .get_or_init(|| {
            let path = plugin::find().map_err(|e| e.to_string())?;
            let api = Api::load(&path).map_err(|e| e.to_string())?;
            let client = Client::new(api).map_err(|e| format!("{} ({})", e, path.display()))?;
            tracing::info!(
                plugin = %path.display(),
                platform = client.platform(),
                devices = client.device_count(),
                "xla: PJRT client ready"
            );
            Ok(Runtime {
                client,
                cache: Mutex::new(HashMap::new()),
                stats: Mutex::new(CacheStats::default()),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

impl Runtime {
    /// The PJRT client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The executable for `text`, compiling it on a miss.
    pub fn executable(&self, text: &str) -> Result<Arc<Executable>, String> {
        if let Some(exe) = self.cache.lock().expect("cache lock").get(text) {
            self.stats.lock().expect("stats lock").hits += 1;
            return Ok(exe.clone());
        }
        let start = Instant::now();
        let exe = Arc::new(self.client.compile(text).map_err(|e| {
            tracing::debug!("xla: the program that failed to compile:\n{text}");
            e.to_string()
        })?);
        let took = start.elapsed();
        self.record_compile(took);
        self.cache
            .lock()
            .expect("cache lock")
            .insert(text.to_owned(), exe.clone());
        Ok(exe)
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

    pub(crate) fn record_execution(&self) {
        self.stats.lock().expect("stats lock").executions += 1;
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
