//! DeviceStatsMonitor from the command line: its rows land at the steps of the Trainer's own
//! step metrics, and the CPU's `cpu_percent` is the process's real use over each interval (a
//! fit on the CPU keeps at least part of a core busy), however short the interval is.

use std::collections::BTreeMap;

use ember_acceptance::run_cpu_only;

/// Every column of metrics.csv, as (step, value) where the row has a value.
fn columns(csv: &str) -> BTreeMap<String, Vec<(u64, f64)>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let mut columns: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        let step: u64 = cells[0].parse().unwrap();
        for (name, cell) in header.iter().zip(&cells).skip(1) {
            if !cell.is_empty() {
                let value = cell.parse().unwrap();
                columns
                    .entry((*name).to_owned())
                    .or_default()
                    .push((step, value));
            }
        }
    }
    columns
}

#[test]
fn rows_share_the_trainers_steps_and_cpu_use_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "fit",
        "--trainer.max_epochs=4",
        "--trainer.log_every_n_steps=10",
        "--trainer.callbacks=DeviceStatsMonitor",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
    ];
    let out = run_cpu_only(env!("CARGO_BIN_EXE_digits"), dir.path(), &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.path().join("lightning_logs/version_0/metrics.csv"));
    let columns = columns(&csv.unwrap());
    let steps = |name: &str| -> Vec<u64> { columns[name].iter().map(|p| p.0).collect() };
    // 23 steps an epoch, 92 in all: the 10th, 20th, ... step, logged at 9, 19, ... 89.
    let expected: Vec<u64> = (1..=9).map(|k| 10 * k - 1).collect();
    assert_eq!(steps("train_loss"), expected);
    assert_eq!(steps("device_stats/rss_bytes"), expected);
    let cpu: Vec<f64> = columns["device_stats/cpu_percent"]
        .iter()
        .map(|p| p.1)
        .collect();
    assert_eq!(cpu.len(), expected.len(), "{cpu:?}");
    let mut sorted = cpu.clone();
    sorted.sort_by(f64::total_cmp);
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    assert!(
        sorted[0] > 2.0 && sorted[sorted.len() / 2] > 15.0,
        "{cpu:?}"
    );
    assert!(sorted.iter().all(|&c| c <= 100.0 * cores + 10.0), "{cpu:?}");
}
