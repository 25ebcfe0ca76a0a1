//! ThroughputMonitor in a fit, against Lightning's (its tests in
//! `tests/tests_pytorch/callbacks/test_throughput_monitor.py`): once its window is full it logs
//! the rates of the batches the loop ran, and their ratios are those of the workload: samples
//! per batch the loader's batch size, items, FLOPs and MFU the configured multiples of them.

use std::collections::BTreeMap;
use std::path::Path;

use burn_autodiff::Autodiff;
use burn_flex::{Flex, FlexDevice};
use ember::callbacks::{Callback, CallbackContext, ThroughputConfig, ThroughputMonitor};
use ember::{Trainer, TrainerOptions};
use ember_acceptance::regression::{Regression, data, quiet_options, serial};

type B = Autodiff<Flex>;

/// Keeps the metrics the callbacks logged, as fit ends.
#[derive(Clone, Default)]
struct Metrics(std::rc::Rc<std::cell::RefCell<BTreeMap<String, f64>>>);

impl Callback for Metrics {
    fn name(&self) -> &str {
        "Metrics"
    }
    fn on_fit_end(&mut self, ctx: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        *self.0.borrow_mut() = ctx.state.callback_metrics.clone();
        Ok(())
    }
}

fn options(root: &Path) -> TrainerOptions {
    TrainerOptions {
        log_every_n_steps: 1,
        ..quiet_options(root, 3)
    }
}

#[test]
fn the_logged_rates_are_those_of_the_batches_run() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let monitor = ThroughputMonitor::new(ThroughputConfig {
        window_size: 4,
        items_per_sample: Some(16.0),
        flops_per_sample: Some(300.0),
        available_flops: Some(1e6),
    })
    .unwrap();
    let metrics = Metrics::default();
    let callbacks: Vec<Box<dyn Callback>> = vec![Box::new(monitor), Box::new(metrics.clone())];
    let mut trainer = Trainer::<B>::on_device(FlexDevice, options(dir.path()))
        .unwrap()
        .with_callbacks(callbacks);
    let model = Regression::new(trainer.device());
    // 40 training items in batches of 10: 4 full batches an epoch, 12 in all.
    trainer.fit(model, &mut data(40, 20, 10)).unwrap();
    let m = metrics.0.borrow();
    assert_eq!((m["train/batches"], m["train/samples"]), (12.0, 120.0));
    assert!(m["train/time"] > 0.0);
    let batches = m["train/device/batches_per_sec"];
    let samples = m["train/device/samples_per_sec"];
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(batches > 0.0);
    assert!(close(samples, 10.0 * batches), "{samples} vs {batches}");
    assert!(close(m["train/device/items_per_sec"], 16.0 * samples));
    assert!(close(m["train/device/flops_per_sec"], 300.0 * samples));
    assert!(close(m["train/device/mfu"], 300.0 * samples / 1e6));
    assert!(!m.contains_key("train/batches_per_sec"), "one process");

    // The metrics reach the loggers too.
    let csv = dir.path().join("lightning_logs/version_0/metrics.csv");
    let header = std::fs::read_to_string(csv).unwrap();
    let header = header.lines().next().unwrap().to_owned();
    assert!(header.contains("train/device/samples_per_sec"), "{header}");
}

#[test]
fn a_window_too_small_to_measure_is_refused_by_name() {
    let _serial = serial();
    let mut o = TrainerOptions::default();
    let callbacks =
        serde_json::json!([{"class_path": "ThroughputMonitor", "init_args": {"window_size": 1}}]);
    o.set("callbacks", &callbacks).unwrap();
    let e = Trainer::<B>::on_device(FlexDevice, o)
        .err()
        .expect("refused");
    let e = format!("{e:#}");
    assert!(
        e.contains("ThroughputMonitor") && e.contains("window_size"),
        "{e}"
    );
}
