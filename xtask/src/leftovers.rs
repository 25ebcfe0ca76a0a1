//! What a test row leaves behind. Every process a row starts carries [`MARK`] in its
//! environment (children inherit it, daemons that detach included); one still alive after the
//! row is a leak (a server, a scheduler daemon, a rank). Every process also gets a temporary
//! directory of the row's own as `TMPDIR`: whatever is still in it after the row, or new in the
//! repository's tree, was written outside a test's temporary directory (or not cleaned up). The
//! harness names each leak, removes it and fails the row, so a leak is seen the day it appears.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::root;

/// The variable that marks a row's processes.
pub(crate) const MARK: &str = "EMBER_TEST_ROW";

/// How long processes that are ending get before they count as left behind.
const GRACE: Duration = Duration::from_secs(10);

/// One row's watch: its mark, its temporary directory and what the repository's tree held
/// before it.
pub(crate) struct Watch {
    mark: String,
    scratch: PathBuf,
    tree: BTreeSet<String>,
}

impl Watch {
    /// Starts watching a row of `backend`: makes its temporary directory (short: OpenMPI and
    /// PMIx put sockets in it) and notes the repository's tree.
    pub(crate) fn start(backend: &str) -> Watch {
        let mark = format!("{backend}-{}", std::process::id());
        let scratch = std::env::temp_dir().join(format!("ember-row-{mark}"));
        let _ = std::fs::remove_dir_all(&scratch);
        if let Err(e) = std::fs::create_dir_all(&scratch) {
            eprintln!("xtask: cannot make {}: {e}", scratch.display());
        }
        Watch {
            mark,
            scratch,
            tree: tree(),
        }
    }

    /// The variables every process of the row gets: the mark and `TMPDIR`.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            (MARK.to_owned(), self.mark.clone()),
            ("TMPDIR".to_owned(), self.scratch.display().to_string()),
        ]
    }

    /// After the row: true when it left no process running, nothing in its temporary directory
    /// and nothing new in the repository's tree; names and removes what it left.
    pub(crate) fn finish(self) -> bool {
        let processes = none_left(&self.mark);
        let mut files = true;
        for entry in std::fs::read_dir(&self.scratch)
            .into_iter()
            .flatten()
            .flatten()
        {
            eprintln!(
                "xtask: the row left {} in its temporary directory, now removed",
                entry.path().display()
            );
            files = false;
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
        for path in tree().difference(&self.tree) {
            eprintln!("xtask: the row wrote {path} into the repository (left there)");
            files = false;
        }
        processes && files
    }
}

/// The repository's untracked and ignored paths, as `git status` lists them (a new directory
/// as one entry), but for build outputs: anything in a directory named `target` (cargo's, and
/// the autotune cache CubeCL keeps beside the nearest Cargo.toml); empty when git cannot say.
fn tree() -> BTreeSet<String> {
    let out = Command::new("git")
        .args([
            "status",
            "--porcelain",
            "--ignored=matching",
            "--untracked-files=normal",
        ])
        .current_dir(root())
        .output();
    let Ok(out) = out else {
        return BTreeSet::new();
    };
    (String::from_utf8_lossy(&out.stdout).lines())
        .filter_map(|line| line.strip_prefix("?? ").or(line.strip_prefix("!! ")))
        .filter(|path| !path.split('/').any(|part| part == "target"))
        .map(str::to_owned)
        .collect()
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
fn none_left(mark: &str) -> bool {
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

    #[test]
    fn a_file_left_in_the_rows_temporary_directory_fails_it_and_is_removed() {
        let watch = Watch::start(&format!("leftovers-files-{}", std::process::id()));
        let tmpdir = watch
            .env()
            .into_iter()
            .find(|(k, _)| k == "TMPDIR")
            .unwrap()
            .1;
        let left = PathBuf::from(&tmpdir).join("ompi.session");
        std::fs::create_dir_all(&left).unwrap();
        assert!(!watch.finish(), "a directory left in TMPDIR passes");
        assert!(!PathBuf::from(tmpdir).exists());
        assert!(Watch::start("leftovers-clean").finish());
    }
}
