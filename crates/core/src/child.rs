//! Child processes run to their end with their output and their peak resident memory (the
//! batch-size finder's trials; the benchmarks' contenders).

use std::io::Read;
use std::process::{Command, Stdio};

/// How a child process ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its exit code, or `None` when a signal ended it (an abort).
    pub code: Option<i32>,
    /// The peak resident set of its largest process, in bytes.
    pub peak_rss: u64,
}

/// Runs `command` to its end, capturing its output and measuring its peak resident memory.
pub fn run_measured(mut command: Command) -> anyhow::Result<Finished> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: waits for our own child, whose pid `spawn` returned, with valid out-pointers.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    anyhow::ensure!(waited > 0, "wait4: {}", std::io::Error::last_os_error());
    let join = |h: std::thread::JoinHandle<std::io::Result<String>>| {
        h.join()
            .map_err(|_| anyhow::anyhow!("reading a child's output panicked"))?
            .map_err(anyhow::Error::from)
    };
    let (stdout, stderr) = (join(out)?, join(err)?);
    let exited = libc::WIFEXITED(status);
    Ok(Finished {
        stdout,
        stderr,
        success: exited && libc::WEXITSTATUS(status) == 0,
        code: exited.then(|| libc::WEXITSTATUS(status)),
        // Linux reports ru_maxrss in KiB.
        peak_rss: usage.ru_maxrss as u64 * 1024,
    })
}
