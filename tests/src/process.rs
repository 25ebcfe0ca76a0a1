//! Child processes measured from the outside, for the benchmarks.

use std::io::Read;
use std::process::{Command, Stdio};

/// Runs `command` to its end; its stdout, stderr and the peak RSS of its largest process.
pub fn run_measured(mut command: Command) -> anyhow::Result<(String, String, u64)> {
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
    let (stdout, stderr) = (out.join().unwrap()?, err.join().unwrap()?);
    anyhow::ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the run failed: {stderr}"
    );
    // Linux reports ru_maxrss in KiB.
    Ok((stdout, stderr, usage.ru_maxrss as u64 * 1024))
}
