//! ember as a dependency, timed: the conv example's CNN built as a crate outside this workspace
//! from the guide's `Cargo.toml` (no `[patch]`; tests/outside/mod.rs makes it) against
//! `examples/conv`'s own binary, both release builds, alternating in one run, the order
//! rotating every round. Each fit: 15 epochs (345 steps), 2 threads, loggers, checkpoints,
//! summary and progress bar off; train steps/s as fit reports them.
//!
//! Wall time swings here by ±10 %, so each binary also runs a 2-epoch fit once under valgrind's
//! cachegrind: its instruction count (`I refs`), which does not.
//!
//! `cargo xtask bench outside [ROUNDS]` (default 7). Prints each round's steps/s, the medians and
//! the counts; the last line is `outside/examples-conv: X.XXx steps/s (outside N, conv M),
//! X.XXXx instructions`.

#[path = "../tests/outside/mod.rs"]
#[allow(dead_code)]
mod outside;
#[path = "../../digits/benches/common/rounds.rs"]
mod rounds;

use std::path::Path;
use std::process::Command;

use rounds::{median, rounds};

/// A fit of `epochs` by `binary`, run by `runner` (e.g. valgrind) when given, with the progress
/// bar, loggers, checkpoints and summary off; its stdout and stderr.
fn fit(runner: &[&str], binary: &Path, epochs: u32) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = match runner {
        [] => Command::new(binary),
        [program, args @ ..] => {
            let mut command = Command::new(program);
            command.args(args).arg(binary);
            command
        }
    };
    let out = command
        .arg("fit")
        .arg(format!("--trainer.max_epochs={epochs}"))
        .args([
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_model_summary=false",
            "--trainer.enable_progress_bar=false",
        ])
        .current_dir(dir.path())
        .env("EMBER_INVENTORY", "")
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The instructions a 2-epoch fit by `binary` executes (cachegrind's `I refs`).
fn instructions(binary: &Path) -> f64 {
    let valgrind = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
    ];
    let (_, stderr) = fit(&valgrind, binary, 2);
    // "==123== I   refs:      2,828,103,325"
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("refs:")
                .map(|(_, n)| n.trim().replace(',', ""))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no I refs in {stderr}"))
}

/// One 15-epoch fit by `binary`; its train steps/s.
fn steps_per_second(binary: &Path) -> f64 {
    let (stdout, _) = fit(&[], binary, 15);
    // "trained 345 steps in 1.13 s (306 steps/s) on cpu; ..."
    stdout
        .split(" steps/s)")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no steps/s in {stdout}"))
}

fn main() {
    let rounds = rounds(7);
    let dir = tempfile::tempdir().unwrap();
    outside::make_crate(dir.path());
    eprintln!("building the crate outside the workspace (release) ...");
    let outside_conv = outside::build(dir.path(), "release").unwrap_or_else(|e| panic!("{e}"));
    let conv = Path::new(env!("CARGO_BIN_EXE_conv")).to_path_buf();
    let contenders = [("outside", outside_conv), ("conv", conv)];
    let mut figures = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for k in 0..contenders.len() {
            let i = (round + k) % contenders.len();
            let (name, binary) = &contenders[i];
            let rate = steps_per_second(binary);
            println!("round {round}: {name} {rate:.0} steps/s");
            figures[i].push(rate);
        }
    }
    let [outside, conv] = figures.map(median);
    println!("medians: outside {outside:.0} steps/s, conv {conv:.0} steps/s");
    let counts = contenders.map(|(_, binary)| instructions(&binary));
    println!(
        "instructions per 2-epoch fit: outside {:.0}, conv {:.0}",
        counts[0], counts[1]
    );
    println!(
        "outside/examples-conv: {:.2}x steps/s (outside {outside:.0}, conv {conv:.0}), {:.3}x instructions",
        outside / conv,
        counts[0] / counts[1]
    );
}
