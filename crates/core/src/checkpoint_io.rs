//! CheckpointIO: how checkpoint bytes reach storage (Lightning's `CheckpointIO` plugin).
//!
//! The local implementation never leaves a half-written file under the final name: it
//! writes a temporary file in the target directory, fsyncs it, renames it over the target,
//! and fsyncs the directory, so a crash at any instant leaves either the old file or the new.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Saves, loads and removes checkpoint files.
pub trait CheckpointIO: Send + Sync {
    /// Writes `bytes` to `path`, replacing any file there only once the new one is complete.
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()>;

    /// Reads the file at `path`.
    fn load(&self, path: &Path) -> anyhow::Result<Vec<u8>>;

    /// Removes the file at `path` (no error if it is already gone).
    fn remove(&self, path: &Path) -> anyhow::Result<()>;
}

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

impl CheckpointIO for LocalCheckpointIO {
    fn save(&self, bytes: &[u8], path: &Path) -> anyhow::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = temp_path(path);
        let written = (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(bytes)?;
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
}
