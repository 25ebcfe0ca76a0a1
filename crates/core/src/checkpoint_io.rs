//! CheckpointIO: how checkpoint bytes reach storage (Lightning's `CheckpointIO` plugin).
//!
//! The local implementation never leaves a half-written file under the final name: it
//! writes a temporary file in the target directory, fsyncs it, renames it over the target,
//! and fsyncs the directory, so a crash at any instant leaves either the old file or the new.
//! A power cut, which also loses what the page cache had not written, leaves the same: the
//! directory itself is made durable first (each new directory's parent fsynced), and
//! examples/digits/tests/power_loss.rs cuts the power at 100 points of a run's checkpoint writes.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::Context;

/// Saves, loads and removes checkpoint files.
pub trait CheckpointIO: Send + Sync {
    /// Writes `bytes` to `path`, replacing any file there only once the new one is complete.
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()>;

    /// Writes the bytes `encode` makes to `path`, as [`save`](Self::save). The Trainer saves
    /// through this, so an implementation that writes in the background can also encode there
    /// (checksums, serialisation) and keep that work off the training loop's thread. By
    /// default it encodes on the calling thread and calls `save`.
    fn save_encoded(&self, encode: Encode, path: &Path) -> anyhow::Result<()> {
        self.save(&encode()?, path)
    }

    /// Reads the file at `path`.
    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>>;

    /// Removes the file at `path` (no error if it is already gone).
    fn remove(&self, path: &Path) -> anyhow::Result<()>;

    /// The error of a background write that has failed since the last call, without waiting
    /// (the Trainer calls it after every optimizer step).
    fn check(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Waits until no write is in flight; returns its error if it failed.
    fn wait(&self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Makes a checkpoint's bytes (see [`CheckpointIO::save_encoded`]).
pub type Encode = Box<dyn FnOnce() -> anyhow::Result<Vec<u8>> + Send>;

type Write = JoinHandle<anyhow::Result<()>>;

/// Encodes and writes through another CheckpointIO on a background thread while training goes
/// on, with at most one write in flight: `save` waits for the previous write first, `check`
/// reports a failed write on the next step, `wait` (called by the Trainer at the end of every
/// entry point) joins it. A remove runs after the write in flight, without making the loop wait (so
/// ModelCheckpoint's "save the new best, remove the old" overlaps training), and is skipped
/// when that write failed, so the old file is never removed for a new one that is missing.
/// Loads wait for the writes in flight, so they see their files.
pub struct AsyncCheckpointIO<T: ?Sized> {
    inner: Arc<T>,
    in_flight: Mutex<Option<Write>>,
}

impl<T: CheckpointIO + 'static> AsyncCheckpointIO<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Self::wrapping(Arc::new(inner))
    }
}

impl<T: CheckpointIO + ?Sized + 'static> AsyncCheckpointIO<T> {
    /// Wraps a shared IO, e.g. a registered plugin's `Arc<dyn CheckpointIO>`.
    pub fn wrapping(inner: Arc<T>) -> Self {
        Self {
            inner,
            in_flight: Mutex::new(None),
        }
    }

    fn join(write: Write) -> anyhow::Result<()> {
        write
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the checkpoint writer thread panicked")))
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Write>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: CheckpointIO + ?Sized + 'static> CheckpointIO for AsyncCheckpointIO<T> {
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
        let bytes = bytes.to_vec();
        self.save_encoded(Box::new(move || Ok(bytes)), path)
    }

    /// Encodes and writes on the background thread.
    fn save_encoded(&self, encode: Encode, path: &Path) -> anyhow::Result<()> {
        let mut slot = self.slot();
        if let Some(previous) = slot.take() {
            Self::join(previous)?;
        }
        let (inner, path) = (Arc::clone(&self.inner), path.to_owned());
        *slot = Some(std::thread::spawn(move || inner.save(&encode()?, &path)));
        Ok(())
    }

    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
        self.wait()?;
        self.inner.load(path)
    }

    fn remove(&self, path: &Path) -> anyhow::Result<()> {
        let mut slot = self.slot();
        let previous = slot.take();
        let (inner, path) = (Arc::clone(&self.inner), path.to_owned());
        *slot = Some(std::thread::spawn(move || {
            previous.map_or(Ok(()), Self::join)?;
            inner.remove(&path)
        }));
        Ok(())
    }

    /// Its own write's error, then the wrapped IO's (which may write in the background too).
    fn check(&self) -> anyhow::Result<()> {
        let mut slot = self.slot();
        match slot.take() {
            Some(write) if write.is_finished() => Self::join(write)?,
            other => *slot = other,
        }
        self.inner.check()
    }

    /// Waits for its own write, then for the wrapped IO's.
    fn wait(&self) -> anyhow::Result<()> {
        let own = self.slot().take().map_or(Ok(()), Self::join);
        let inner = self.inner.wait();
        own.and(inner)
    }
}

/// Bytes per `write` call: a large checkpoint goes out in several calls, as a streaming
/// serializer's would, so the fault test's kills land inside files too.
pub const WRITE_CHUNK: usize = 1 << 20;

/// Atomic writes to the local file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalCheckpointIO;

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Makes `dir`'s entry in its parent durable, and its parent's, and so on: a directory that
/// `create_dir_all` (or a logger) made is lost in a power cut until its parent is fsynced.
/// Directories known durable are remembered for the life of the process, so each is synced into
/// its parent once.
fn make_durable(dir: &Path) -> std::io::Result<()> {
    static DURABLE: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let dir = dir.canonicalize()?;
    let mut durable = DURABLE.lock().unwrap_or_else(|e| e.into_inner());
    let durable = durable.get_or_insert_with(HashSet::new);
    for (child, parent) in dir.ancestors().zip(dir.ancestors().skip(1)) {
        if durable.contains(child) {
            break;
        }
        match File::open(parent) {
            Ok(parent) => parent.sync_all()?,
            // A parent this process may not read (say, `/` in a container): it cannot be synced
            // from here, as from any program.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            Err(e) => return Err(e),
        }
        durable.insert(child.to_owned());
    }
    Ok(())
}

impl CheckpointIO for LocalCheckpointIO {
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        make_durable(dir).with_context(|| format!("syncing {}", dir.display()))?;
        let tmp = temp_path(path);
        let written = (|| {
            let mut file = File::create(&tmp)?;
            for chunk in bytes.chunks(WRITE_CHUNK) {
                file.write_all(chunk)?;
            }
            file.sync_all()?;
            fs::rename(&tmp, path)?;
            File::open(dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("writing checkpoint {}", path.display()));
        }
        Ok(())
    }

    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
        fs::read(path).with_context(|| format!("reading checkpoint {}", path.display()))
    }

    fn remove(&self, path: &Path) -> anyhow::Result<()> {
        match fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing checkpoint {}", path.display()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails every save whose path ends in `bad.ckpt`.
    struct Flaky;

    impl CheckpointIO for Flaky {
        fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
            anyhow::ensure!(!path.ends_with("bad.ckpt"), "disk full");
            LocalCheckpointIO.save(bytes, path)
        }
        fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
            LocalCheckpointIO.load(path)
        }
        fn remove(&self, path: &Path) -> anyhow::Result<()> {
            LocalCheckpointIO.remove(path)
        }
    }

    #[test]
    fn async_writes_finish_in_order_and_surface_errors() {
        let dir = std::env::temp_dir().join(format!("ember-async-{}", std::process::id()));
        let io = AsyncCheckpointIO::new(Flaky);
        for i in 0..5u8 {
            io.save(&[i; 1000], &dir.join("a.ckpt")).unwrap();
        }
        assert_eq!(io.load(&dir.join("a.ckpt")).unwrap(), [4; 1000]);
        io.save(b"x", &dir.join("bad.ckpt")).unwrap();
        io.wait().unwrap_err();
        io.wait().unwrap();
        io.save(b"x", &dir.join("bad.ckpt")).unwrap();
        let e = io.save(b"y", &dir.join("b.ckpt")).unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        io.save(b"x", &dir.join("bad.ckpt")).unwrap();
        while io.check().is_ok() {
            std::thread::yield_now();
        }
        io.check().unwrap();
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn async_removes_wait_for_the_write_before_them_and_are_skipped_when_it_failed() {
        let dir = std::env::temp_dir().join(format!("ember-async-rm-{}", std::process::id()));
        let io = AsyncCheckpointIO::new(Flaky);
        io.save(b"old", &dir.join("old.ckpt")).unwrap();
        io.save(b"new", &dir.join("new.ckpt")).unwrap();
        io.remove(&dir.join("old.ckpt")).unwrap();
        io.wait().unwrap();
        assert!(!dir.join("old.ckpt").exists());
        assert_eq!(io.load(&dir.join("new.ckpt")).unwrap(), b"new");

        io.save(b"x", &dir.join("bad.ckpt")).unwrap();
        io.remove(&dir.join("new.ckpt")).unwrap();
        let e = io.wait().unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert!(
            dir.join("new.ckpt").exists(),
            "kept: the save before the remove failed"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn save_replaces_whole_files_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("ember-ckio-{}", std::process::id()));
        let path = dir.join("sub/a.ckpt");
        let io = LocalCheckpointIO;
        io.save(b"first", &path).unwrap();
        io.save(b"second", &path).unwrap();
        assert_eq!(io.load(&path).unwrap(), b"second");
        let names: Vec<_> = fs::read_dir(dir.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.ckpt")]);
        io.remove(&path).unwrap();
        io.remove(&path).unwrap();
        assert!(io.load(&path).unwrap_err().to_string().contains("a.ckpt"));
        fs::remove_dir_all(dir).unwrap();
    }

    /// Writes local files after a pause, as a slow remote store would.
    struct Slow;

    impl CheckpointIO for Slow {
        fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
            std::thread::sleep(std::time::Duration::from_millis(100));
            LocalCheckpointIO.save(bytes, path)
        }
        fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>> {
            LocalCheckpointIO.load(path)
        }
        fn remove(&self, path: &Path) -> anyhow::Result<()> {
            LocalCheckpointIO.remove(path)
        }
    }

    /// The Trainer wraps whatever IO a run uses; an IO that writes in the background itself is
    /// waited for too.
    #[test]
    fn a_wrapped_background_writer_is_waited_for() {
        let dir = std::env::temp_dir().join(format!("ember-ckio-wrapped-{}", std::process::id()));
        let inner: Arc<dyn CheckpointIO> = Arc::new(AsyncCheckpointIO::new(Slow));
        let io = AsyncCheckpointIO::wrapping(inner);
        io.save(b"x", &dir.join("a.ckpt")).unwrap();
        io.wait().unwrap();
        assert!(
            dir.join("a.ckpt").exists(),
            "wait returned before the write"
        );
        fs::remove_dir_all(dir).unwrap();
    }
}
