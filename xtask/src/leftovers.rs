//! What a test row leaves running. Every process a row starts carries [`MARK`] in its
//! environment (children inherit it, daemons that detach included); one still alive after the
//! row is a leak (a server, a scheduler daemon, a rank): the harness names it, stops it and
//! fails the row, so a leak is seen the day it appears.

use std::process::Command;
use std::time::{Duration, Instant};

/// The variable that marks a row's processes.
pub(crate) const MARK: &str = "EMBER_TEST_ROW";

/// How long processes that are ending get before they count as left behind.
const GRACE: Duration = Duration::from_secs(10);

/// The value marking one row's processes: the row's backend and this xtask's pid.
pub(crate) fn mark(backend: &str) -> String {
    format!("{backend}-{}", std::process::id())
}

/// The running processes whose environment holds `MARK=mark`: pid and command line.
fn marked(mark: &str) -> Vec<(u32, String)> {
    let needle = format!("{MARK}={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let carries = |environ: &[u8]| environ.split(|b| *b == 0).any(|v| v == needle.as_bytes());
    (entries.flatten())
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            carries(&environ).then(|| {
                let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                (pid, shown.trim().to_owned())
            })
        })
        .collect()
}

/// After a row: gives its processes [`GRACE`] to end, then names and kills those still
/// running; true when none was left.
pub(crate) fn none_left(mark: &str) -> bool {
    let deadline = Instant::now() + GRACE;
    let mut left = marked(mark);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        left = marked(mark);
    }
    for (pid, command) in &left {
        eprintln!("xtask: the row left process {pid} running, now stopped: {command}");
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    left.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_process_that_outlives_the_row_is_named_and_stopped() {
        let mark = format!("leftovers-test-{}", std::process::id());
        let mut sleeper = Command::new("sleep")
            .arg("60")
            .env(MARK, &mark)
            .spawn()
            .unwrap();
        // The child's environment shows in /proc once its exec has finished.
        let deadline = Instant::now() + GRACE;
        while marked(&mark).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(marked(&mark).len(), 1);
        assert!(!none_left(&mark), "a running sleep is left behind");
        sleeper.wait().unwrap();
        assert!(marked(&mark).is_empty());
        assert!(none_left(&mark));
    }
}
