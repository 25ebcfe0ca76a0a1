//! Child processes seen from the outside: measured (for the benchmarks), and the ranks of a
//! multi-process run found and watched (for the tests that kill or stop them).

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// The flags that keep a run's output to its summary: no progress bar, no model summary.
pub const QUIET: [&str; 2] = [
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
];

/// `program ARGS` (an ember program) as the end-to-end tests run it: in `dir`, on this
/// machine's CPU only (an empty `EMBER_INVENTORY`), with [`QUIET`].
pub fn quiet(program: &str, dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .args(QUIET)
        .current_dir(dir)
        .env("EMBER_INVENTORY", "");
    command
}

/// Runs `command` to its end; its stdout, stderr and the peak RSS of its largest process.
pub fn run_measured(command: Command) -> anyhow::Result<(String, String, u64)> {
    let finished = ember_core::child::run_measured(command)?;
    anyhow::ensure!(finished.success, "the run failed: {}", finished.stderr);
    Ok((finished.stdout, finished.stderr, finished.peak_rss))
}

/// The pids of the `exe` ranks (OpenMPI's, by `OMPI_COMM_WORLD_RANK`) whose parent chain
/// leads to `launcher`, by rank.
pub fn ranks_of(launcher: u32, exe: &str) -> Vec<(usize, u32)> {
    let mut ranks = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let rank = environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(b"OMPI_COMM_WORLD_RANK="))
            .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok());
        let path = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if let Some(rank) = rank
            && path.file_name().is_some_and(|n| n == exe)
            && descends_from(pid, launcher)
        {
            ranks.push((rank, pid));
        }
    }
    ranks.sort();
    ranks
}

fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    while pid > 1 {
        if pid == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // The parent pid is the second field after the parenthesised command name.
        pid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
    }
    false
}

/// The turn of a test that starts several ranks: a test binary's multi-rank runs hold it so
/// that they run one after another. Two 2-rank runs at once put four busy processes on a
/// 2-core machine, where a rank spins while it waits for one that is not running: two
/// 1800-step digits runs at once took 72–74 s, one alone 26–27 s.
pub fn ranks_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `pid` is still running `within` from now: a killed process can take a moment to
/// go (a stopped one is killed by the launcher as it ends, then reaped), so give it that.
pub fn alive_after(pid: u32, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while alive(pid) {
        if std::time::Instant::now() > deadline {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Starts `command` (a program that shows its progress on stderr), sends it `signal` (`TERM`,
/// `USR1`, ...) once a stderr line starts with `line`, and waits for it: its status and the
/// rest of its stderr.
pub fn signal_at_line(mut command: Command, line: &str, signal: &str) -> (ExitStatus, String) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = BufReader::new(child.stderr.take().unwrap());
    let mut read = String::new();
    while !read.starts_with(line) {
        read.clear();
        if progress.read_line(&mut read).unwrap() == 0 {
            let _ = child.kill();
            panic!("the program ended before a line starting with {line:?}");
        }
    }
    let sent = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let mut rest = String::new();
    progress.read_to_string(&mut rest).unwrap();
    (child.wait().unwrap(), rest)
}

/// Makes `command` the one task of SLURM job 4242 (named `train`), whose `scontrol` — first on
/// `PATH`, in `dir/bin` — records its arguments in `dir` instead of asking a scheduler
/// ([`scontrol_asked`] reads them).
pub fn in_a_fake_slurm_job(command: &mut Command, dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    let record = format!(
        "#!/bin/sh\necho \"$@\" > '{}'\n",
        dir.join("scontrol.args").display()
    );
    std::fs::write(&scontrol, record).unwrap();
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    command.env("PATH", path).envs([
        ("SLURM_NTASKS", "1"),
        ("SLURM_PROCID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOB_NAME", "train"),
    ]);
}

/// What the `scontrol` of [`in_a_fake_slurm_job`] in `dir` was asked, if anything.
pub fn scontrol_asked(dir: &Path) -> Option<String> {
    let asked = std::fs::read_to_string(dir.join("scontrol.args")).ok()?;
    Some(asked.trim().to_owned())
}
