//! Where a run's time goes (`--trainer.profiler`): Lightning's `SimpleProfiler` (a table per
//! entry point: each phase's count, mean, total and share of the entry point's time) and a
//! trace per rank in Chrome's trace-event JSON (`advanced`; open it in Perfetto or
//! chrome://tracing), with spans nested as the phases are.
//!
//! A phase is timed by a [`Span`]: the backend is synchronised when it starts and when it ends,
//! so device work queued inside it is counted in it, not in whatever next waits for the device.
//! With the profiler off a span is nothing: no clock is read and nothing is synchronised.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::options::ProfilerKind;

/// One span as a trace records it.
struct Event {
    name: &'static str,
    start: Duration,
    duration: Duration,
}

/// What one entry point recorded.
struct Recording {
    kind: ProfilerKind,
    started: Instant,
    /// Per phase: how many spans and their total time.
    totals: BTreeMap<&'static str, (u64, Duration)>,
    /// Every span, for a trace (`advanced` only).
    events: Vec<Event>,
}

/// The profiler of a Trainer: off, or recording the entry point running. Clones share it.
#[derive(Clone)]
pub struct Profiler {
    recording: Option<Rc<RefCell<Recording>>>,
    kind: Option<ProfilerKind>,
    /// Waits for the device's queued work.
    sync: Rc<dyn Fn()>,
}

/// Times one phase from its creation to its drop.
#[must_use = "a span times the phase until it is dropped"]
pub struct Span {
    open: Option<(Rc<RefCell<Recording>>, &'static str, Instant)>,
    sync: Option<Rc<dyn Fn()>>,
}

impl Profiler {
    /// A profiler of `kind` (`None`: off) that synchronises the device with `sync`.
    pub fn new(kind: Option<ProfilerKind>, sync: Rc<dyn Fn()>) -> Self {
        Self {
            recording: None,
            kind,
            sync,
        }
    }

    /// A profiler that records nothing, for work the user did not ask to profile (the
    /// learning-rate finder's sweep before a fit).
    pub fn off(&self) -> Self {
        Self::new(None, Rc::clone(&self.sync))
    }

    /// Starts recording an entry point (dropping what an earlier one left).
    pub fn start(&mut self) {
        self.recording = self.kind.map(|kind| {
            Rc::new(RefCell::new(Recording {
                kind,
                started: Instant::now(),
                totals: BTreeMap::new(),
                events: Vec::new(),
            }))
        });
    }

    /// Whether it writes a trace file per rank (`advanced`).
    pub fn writes_traces(&self) -> bool {
        self.kind == Some(ProfilerKind::Advanced)
    }

    /// A span of the phase `name`; nothing when the profiler is off.
    pub fn span(&self, name: &'static str) -> Span {
        let Some(recording) = &self.recording else {
            return Span {
                open: None,
                sync: None,
            };
        };
        (self.sync)();
        Span {
            open: Some((Rc::clone(recording), name, Instant::now())),
            sync: Some(Rc::clone(&self.sync)),
        }
    }

    /// Ends the entry point `stage`: the table (`simple`, for rank 0 to print) or the trace file
    /// written to `dir` (`advanced`, every rank; its path). Nothing when off.
    pub fn finish(&mut self, stage: &str, rank: usize, dir: &Path) -> anyhow::Result<Report> {
        let Some(recording) = self.recording.take() else {
            return Ok(Report::None);
        };
        let recording = recording.borrow();
        let total = recording.started.elapsed();
        Ok(match recording.kind {
            ProfilerKind::Simple => Report::Table(table(stage, &recording.totals, total)),
            ProfilerKind::Advanced => {
                let path = dir.join(format!("trace-{stage}-rank{rank}.json"));
                write_trace(&path, &recording.events, rank)?;
                Report::Trace(path)
            }
        })
    }
}

/// What an entry point's profile gave.
#[derive(Debug)]
pub enum Report {
    /// The profiler was off.
    None,
    /// `simple`'s table.
    Table(String),
    /// Where `advanced` wrote this rank's trace.
    Trace(PathBuf),
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some((recording, name, started)) = self.open.take() else {
            return;
        };
        if let Some(sync) = &self.sync {
            sync();
        }
        let duration = started.elapsed();
        let mut recording = recording.borrow_mut();
        let entry = recording.totals.entry(name).or_default();
        entry.0 += 1;
        entry.1 += duration;
        if recording.kind == ProfilerKind::Advanced {
            let start = started.duration_since(recording.started);
            recording.events.push(Event {
                name,
                start,
                duration,
            });
        }
    }
}

/// Lightning's SimpleProfiler table: one row per phase, the longest total first.
fn table(stage: &str, totals: &BTreeMap<&'static str, (u64, Duration)>, total: Duration) -> String {
    let mut rows: Vec<_> = totals.iter().collect();
    rows.sort_by_key(|row| std::cmp::Reverse(row.1.1));
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(6);
    let mut out = format!("Profiler report: {stage}\n");
    let header = format!(
        "{:<width$} | {:>8} | {:>11} | {:>10} | {:>6}",
        "Action", "Count", "Mean (ms)", "Total (s)", "Share"
    );
    let _ = writeln!(out, "{header}\n{}", "-".repeat(header.len()));
    let _ = writeln!(
        out,
        "{:<width$} | {:>8} | {:>11} | {:>10.3} | {:>5.1}%",
        "Total",
        1,
        "",
        total.as_secs_f64(),
        100.0
    );
    for (name, (count, time)) in rows {
        let mean_ms = time.as_secs_f64() * 1e3 / *count as f64;
        let share = 100.0 * time.as_secs_f64() / total.as_secs_f64().max(f64::MIN_POSITIVE);
        let _ = writeln!(
            out,
            "{name:<width$} | {count:>8} | {mean_ms:>11.3} | {:>10.3} | {share:>5.1}%",
            time.as_secs_f64()
        );
    }
    out
}

/// The spans as Chrome trace events ("X": complete events, microseconds), one process per rank.
fn write_trace(path: &Path, events: &[Event], rank: usize) -> anyhow::Result<()> {
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let events: Vec<_> = events
        .iter()
        .map(|e| {
            json!({
                "name": e.name, "ph": "X", "pid": rank, "tid": 0,
                "ts": micros(e.start), "dur": micros(e.duration),
            })
        })
        .collect();
    let name = json!({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": format!("rank {rank}")}});
    let events: Vec<_> = std::iter::once(name).chain(events).collect();
    let trace = json!({"traceEvents": events, "displayTimeUnit": "ms"});
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, serde_json::to_vec(&trace)?)
        .with_context(|| format!("writing the profiler's trace {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_nest_and_add_up_and_nothing_is_recorded_when_off() {
        let synced = Rc::new(std::cell::Cell::new(0));
        let count = Rc::clone(&synced);
        let sync: Rc<dyn Fn()> = Rc::new(move || count.set(count.get() + 1));
        let mut off = Profiler::new(None, Rc::clone(&sync));
        off.start();
        drop(off.span("forward"));
        assert_eq!(synced.get(), 0, "off: no sync");
        assert!(matches!(
            off.finish("fit", 0, Path::new(".")).unwrap(),
            Report::None
        ));

        let mut simple = Profiler::new(Some(ProfilerKind::Simple), Rc::clone(&sync));
        simple.start();
        {
            let _batch = simple.span("training batch");
            for _ in 0..3 {
                let _forward = simple.span("forward");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        assert_eq!(synced.get(), 8, "a sync at each span's start and end");
        let Report::Table(table) = simple.finish("fit", 0, Path::new(".")).unwrap() else {
            panic!("a table");
        };
        let row = |name: &str| {
            let line = table.lines().find(|l| l.starts_with(name)).unwrap();
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (
                cells[1].parse::<u64>().unwrap(),
                cells[3].parse::<f64>().unwrap(),
            )
        };
        assert_eq!(row("forward").0, 3);
        assert!(row("forward").1 >= 0.006, "{table}");
        assert!(row("training batch").1 >= row("forward").1, "{table}");
        assert!(table.starts_with("Profiler report: fit"), "{table}");

        let dir = tempfile::tempdir().unwrap();
        let mut advanced = Profiler::new(Some(ProfilerKind::Advanced), sync);
        advanced.start();
        {
            let _outer = advanced.span("validation");
            let _inner = advanced.span("data fetch");
        }
        let Report::Trace(path) = advanced.finish("fit", 1, dir.path()).unwrap() else {
            panic!("a trace");
        };
        assert!(path.ends_with("trace-fit-rank1.json"));
        let trace: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        assert_eq!(
            events[0]["args"]["name"], "rank 1",
            "the process is named after the rank"
        );
        let events = &events[1..];
        assert_eq!(events.len(), 2);
        // The inner span ends first; it lies within the outer one.
        let (inner, outer) = (&events[0], &events[1]);
        assert_eq!(
            (inner["name"].as_str(), outer["name"].as_str()),
            (Some("data fetch"), Some("validation"))
        );
        let end = |e: &serde_json::Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
        assert!(inner["ts"].as_f64() >= outer["ts"].as_f64() && end(inner) <= end(outer));
        assert_eq!(inner["pid"], 1);
    }
}
