//! `cargo xtask fault checkpoint --runs N`: kills the checkpoint writer N times at random
//! moments and prints `N runs, M loadable` (every run must leave its newest checkpoint
//! loadable). Exits non-zero when M < N.

use std::process::ExitCode;

fn main() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = match args.iter().position(|a| a == "--runs") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                anyhow::anyhow!("invalid --runs value: expected a number of runs > 0")
            })?,
        None => 100,
    };
    let writer = std::env::current_exe()?.with_file_name("ckpt_writer");
    let loadable = ember_acceptance::fault::kill_runs(&writer, runs, 0x5EED, false)?;
    println!("{runs} runs, {loadable} loadable");
    Ok(if loadable == runs {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
