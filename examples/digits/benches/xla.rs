//! The xla accelerator (XLA's CPU plugin through PJRT) against ember's default cpu accelerator
//! (burn-flex): the digits MLP and a wide one, trained by the Trainer, alternating in one run.
//!
//! `cargo xtask bench xla [ROUNDS]`. For each workload a first fit on each side is untimed: on
//! xla it compiles the programs (its line gives how many, their seconds, and how many were
//! compiled after the first epoch: the target is 0). Then ROUNDS rounds alternate which side
//! goes first and time whole fits of a model whose initial weights are drawn (no validation,
//! files or progress bar; the device is synced before the clock starts and before it stops).
//! Over the timed xla fits the backend's counters give the cache hits and where a step's time
//! goes: recording ops, preparing each program on the host (lowering, cache lookup, scalars and
//! arguments), starting it in the plugin, waiting for the device (reads, and programs held back
//! while the host is too far ahead), and the rest (burn's autodiff
//! and router, the Trainer, the batches). The device runs a program while the host records
//! the next, so its run shows only as the waiting. Host overhead is recording plus
//! preparing, as a share of the step. The CPU a step takes, on the thread that drives the fit
//! and on all the process's threads (XLA's included), is read from the CPU clocks over the
//! same fits, and over jax's timed fits: with two cores every thread competes for them, so
//! the host's CPU is what a small model loses to. Each round also trains the same MLP in jax
//! (`benches/jax_mlp.py`: one jitted step with optax's Adam, same sizes, batch and epochs, on
//! jax's CPU client, in a process of its own that first fits once to compile, then times a
//! fit; the venv `scripts/setup.sh --jax` pins). Both sides see the same environment, so
//! `PJRT_NPROC` (XLA CPU's pool sizes), when given, limits both alike. The last line is
//! `xla/jax: digits X.XXx, wide X.XXx`: steps/s on xla over jax (medians).

#[path = "common/rounds.rs"]
mod rounds;
use rounds::{median, rounds};

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Command;
use std::rc::Rc;
use std::time::Instant;

use anyhow::ensure;
use burn::tensor::backend::Backend;
use digits::data::DigitsData;
use digits::model::{DigitsModel, ModelConfig};
use digits::train::DataConfig;
use ember::callbacks::{Callback, CallbackContext};
use ember::cpu::CpuAccelerator;
use ember::options::Limit;
use ember::xla::XlaAccelerator;
use ember::xla::backend::{CacheStats, stats};
use ember::{Accelerator, DataModule, Plan, Precision, Stage, Trainer, TrainerOptions};

/// A model and how long to train it.
struct Workload {
    name: &'static str,
    hidden: Vec<usize>,
    batch: usize,
    epochs: u64,
}

impl Workload {
    fn describe(&self) -> String {
        let widths: Vec<String> = self.hidden.iter().map(usize::to_string).collect();
        format!(
            "{}: MLP 64-{}-10, batch {}, Adam, {} epochs of the 1437 training images",
            self.name,
            widths.join("-"),
            self.batch,
            self.epochs
        )
    }
}

/// Programs compiled so far, at the end of each training epoch.
struct CompilesPerEpoch(Rc<RefCell<Vec<usize>>>);

impl Callback for CompilesPerEpoch {
    fn name(&self) -> &str {
        "CompilesPerEpoch"
    }

    fn on_train_epoch_end(&mut self, _: &mut CallbackContext<'_>) -> anyhow::Result<()> {
        self.0.borrow_mut().push(stats().compiles);
        Ok(())
    }
}

/// One timed fit.
struct Fit {
    seconds: f64,
    steps: u64,
    /// CPU seconds the fit took on the thread that ran it, and on all the process's threads.
    cpu: Cpu,
    /// The xla backend's compile count at each epoch's end.
    compiles_per_epoch: Vec<usize>,
}

impl Fit {
    fn steps_per_second(&self) -> f64 {
        self.steps as f64 / self.seconds
    }
}

/// CPU seconds: of one thread, and of a whole process.
#[derive(Clone, Copy, Default)]
struct Cpu {
    thread: f64,
    process: f64,
}

impl Cpu {
    /// This thread's and this process's CPU clocks now.
    fn now() -> Cpu {
        let read = |clock| {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec into `t`, which outlives the call.
            let ok = unsafe { libc::clock_gettime(clock, &mut t) } == 0;
            if ok {
                t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
            } else {
                f64::NAN
            }
        };
        Cpu {
            thread: read(libc::CLOCK_THREAD_CPUTIME_ID),
            process: read(libc::CLOCK_PROCESS_CPUTIME_ID),
        }
    }

    fn add(self, other: Cpu) -> Cpu {
        Cpu {
            thread: self.thread + other.thread,
            process: self.process + other.process,
        }
    }

    fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            thread: self.thread - earlier.thread,
            process: self.process - earlier.process,
        }
    }
}

/// Trains `work` on device 0 of `A` at 32-true.
fn fit<A: Accelerator>(work: &Workload) -> anyhow::Result<Fit> {
    let options = TrainerOptions {
        seed: Some(42),
        max_epochs: Some(work.epochs),
        limit_val_batches: Limit::Batches(0),
        num_sanity_val_steps: Some(0),
        enable_progress_bar: false,
        enable_checkpointing: false,
        enable_model_summary: false,
        logger: Vec::new(),
        ..TrainerOptions::default()
    };
    let per_epoch = Rc::new(RefCell::new(Vec::new()));
    let plan = Plan::local(A::name(), Precision::F32True);
    let mut trainer = Trainer::<A::Backend>::new::<A>(&plan, options)?
        .with_callback(CompilesPerEpoch(per_epoch.clone()));
    let mut data = DigitsData::new(DataConfig {
        batch_size: work.batch,
        ..DataConfig::default()
    });
    data.setup(Stage::Fit)?;
    let config = ModelConfig {
        hidden: work.hidden.clone(),
        ..ModelConfig::default()
    };
    let model = DigitsModel::<A::Backend>::new(&config, trainer.device());
    // burn draws a parameter's initial values when it is first read, which `fit` does first
    // thing; jax's side draws its weights before its clock starts, so this side does too
    // (drawing the wide MLP's 1.1 M weights on the host took ~3.6 ms of a 450 ms fit).
    ember_core::trainer::materialize(&model);
    A::Backend::sync(trainer.device())?;
    let (start, cpu) = (Instant::now(), Cpu::now());
    let out = trainer.fit(model, &mut data)?;
    A::Backend::sync(trainer.device())?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = Cpu::now().since(cpu);
    let compiles_per_epoch = per_epoch.borrow().clone();
    Ok(Fit {
        seconds,
        steps: out.global_step,
        cpu,
        compiles_per_epoch,
    })
}

/// What jax's side of a round reports (`benches/jax_mlp.py`).
#[derive(serde::Deserialize)]
struct JaxFit {
    steps: u64,
    seconds: f64,
    first_fit_compiles: u64,
    first_fit_compile_seconds: f64,
    timed_fit_compiles: u64,
    /// CPU seconds of the timed fit: the thread that ran it, and the whole process.
    host_cpu_seconds: f64,
    process_cpu_seconds: f64,
    jax: String,
}

/// The python of the jax venv (`scripts/setup.sh --jax`; `EMBER_JAX_VENV` moves it).
fn jax_python() -> PathBuf {
    let venv = std::env::var_os("EMBER_JAX_VENV").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/ember-jax/venv")
        },
        PathBuf::from,
    );
    venv.join("bin/python")
}

/// Trains `work` in jax: a first fit that compiles, then the timed one.
fn jax_fit(work: &Workload) -> anyhow::Result<JaxFit> {
    let widths: Vec<String> = work.hidden.iter().map(usize::to_string).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/jax_mlp.py");
    let out = Command::new(jax_python())
        .arg(script)
        .args(["--hidden", &widths.join(",")])
        .args(["--batch", &work.batch.to_string()])
        .args(["--epochs", &work.epochs.to_string()])
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "jax: cannot run {} ({e}): scripts/setup.sh --jax",
                jax_python().display()
            )
        })?;
    ensure!(
        out.status.success(),
        "jax: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Measures one workload; returns the medians of steps/s on xla, on cpu and in jax.
fn measure(work: &Workload, rounds: usize) -> anyhow::Result<(f64, f64, f64)> {
    println!("{}", work.describe());
    let before = stats();
    let first = fit::<XlaAccelerator>(work)?;
    let cold = stats() - before;
    let epoch_one = first.compiles_per_epoch[0] - before.compiles;
    let later = first.compiles_per_epoch.last().copied().unwrap_or(0) - first.compiles_per_epoch[0];
    println!(
        "  xla first fit: {} programs compiled in {:.2} s ({epoch_one} in epoch 1, {later} in the {} epochs after it), {:.0} steps/s",
        cold.compiles,
        cold.compile_seconds,
        work.epochs - 1,
        first.steps_per_second()
    );
    fit::<CpuAccelerator>(work)?;

    let (mut xla, mut cpu, mut jax) = (Vec::new(), Vec::new(), Vec::new());
    let mut counted = CacheStats::default();
    let (mut xla_seconds, mut xla_steps) = (0.0, 0);
    let (mut xla_cpu, mut jax_cpu, mut jax_steps) = (Cpu::default(), Cpu::default(), 0);
    for round in 0..rounds {
        // Alternate which side goes first, so neither always runs on a warmer cache.
        let cpu_first = round % 2 == 1;
        let early_cpu = if cpu_first {
            Some(fit::<CpuAccelerator>(work)?)
        } else {
            None
        };
        let before = stats();
        let x = fit::<XlaAccelerator>(work)?;
        let during = stats() - before;
        let c = match early_cpu {
            Some(c) => c,
            None => fit::<CpuAccelerator>(work)?,
        };
        let j = jax_fit(work)?;
        ensure!(
            x.steps == c.steps && x.steps == j.steps,
            "xla trained {} steps, cpu {}, jax {}",
            x.steps,
            c.steps,
            j.steps
        );
        if round == 0 {
            println!(
                "  jax {} first fit: {} programs compiled in {:.2} s; its timed fit compiled {}",
                j.jax, j.first_fit_compiles, j.first_fit_compile_seconds, j.timed_fit_compiles
            );
        }
        jax_cpu = jax_cpu.add(Cpu {
            thread: j.host_cpu_seconds,
            process: j.process_cpu_seconds,
        });
        jax_steps += j.steps;
        let j = j.steps as f64 / j.seconds;
        println!(
            "  round {round}: xla {:.0} steps/s, cpu {:.0} steps/s, jax {j:.0} steps/s ({} steps each)",
            x.steps_per_second(),
            c.steps_per_second(),
            x.steps
        );
        jax.push(j);
        counted = counted + during;
        xla_seconds += x.seconds;
        xla_steps += x.steps;
        xla_cpu = xla_cpu.add(x.cpu);
        xla.push(x.steps_per_second());
        cpu.push(c.steps_per_second());
    }
    print_breakdown(&counted, xla_seconds, xla_steps);
    let per_step = |cpu: Cpu, steps: u64| {
        let ms = |s: f64| s / steps as f64 * 1e3;
        format!(
            "host thread {:.3}, all threads {:.3}",
            ms(cpu.thread),
            ms(cpu.process)
        )
    };
    println!(
        "  CPU a step, ms: xla {}; jax {}",
        per_step(xla_cpu, xla_steps),
        per_step(jax_cpu, jax_steps)
    );
    let (xla, cpu, jax) = (median(xla), median(cpu), median(jax));
    println!(
        "  median steps/s: xla {xla:.0}, cpu {cpu:.0}, jax {jax:.0}; xla/flex {:.2}x, xla/jax {:.2}x",
        xla / cpu,
        xla / jax
    );
    Ok((xla, cpu, jax))
}

/// Where the timed xla fits' steps spent their time.
fn print_breakdown(counted: &CacheStats, seconds: f64, steps: u64) {
    let per_step = |s: f64| s / steps as f64 * 1e3;
    let step = per_step(seconds);
    let record = per_step(counted.record_seconds);
    let prepare = per_step(counted.prepare_seconds);
    let execute = per_step(counted.execute_seconds);
    let wait = per_step(counted.wait_seconds);
    let rest = step - record - prepare - execute - wait - per_step(counted.compile_seconds);
    println!(
        "  xla timed fits: {} programs run, {} cache hits, {} compiles",
        counted.executions, counted.hits, counted.compiles
    );
    println!(
        "  xla step {step:.3} ms = recording {record:.3} + preparing {prepare:.3} + starting {execute:.3} + waiting for the device {wait:.3} + the rest {rest:.3} (autodiff, router, Trainer, batches)"
    );
    println!(
        "  xla host overhead (recording + preparing): {:.1}% of the step",
        (record + prepare) / step * 100.0
    );
}

fn main() -> anyhow::Result<()> {
    let rounds = rounds(5);
    ensure!(
        XlaAccelerator::is_available(),
        "xla: no PJRT plugin found; scripts/setup.sh caches XLA's CPU plugin"
    );
    let digits = Workload {
        name: "digits",
        hidden: ModelConfig::default().hidden,
        batch: DataConfig::default().batch_size,
        epochs: 20,
    };
    let wide = Workload {
        name: "wide",
        hidden: vec![1024, 1024],
        batch: 256,
        epochs: 10,
    };
    let (digits_xla, _, digits_jax) = measure(&digits, rounds)?;
    let (wide_xla, wide_cpu, wide_jax) = measure(&wide, rounds)?;
    println!("xla/flex (wide): {:.2}x", wide_xla / wide_cpu);
    println!(
        "xla/jax: digits {:.2}x, wide {:.2}x",
        digits_xla / digits_jax,
        wide_xla / wide_jax
    );
    Ok(())
}
