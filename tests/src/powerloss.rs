//! A power cut, simulated: what a directory holds after the machine loses power right after
//! any one of the file-system calls a program made, when every write not yet made durable is
//! lost.
//!
//! `tests/powerloss/shim.c`, loaded with `LD_PRELOAD`, records every call that changes files
//! under one directory ([`Log`]); [`Disk`] replays the record and keeps, beside what the
//! program saw, what a power cut would leave: a file's bytes only as of its last `fsync`, and a
//! directory's entries (files created, renamed, removed; directories made) only as of the last
//! `fsync` of that directory. That is the weakest guarantee POSIX gives, so a protocol that
//! survives it survives real file systems, which keep more. [`Disk::materialize`] writes the
//! surviving tree into a fresh directory for the program to resume from.
//!
//! Why a shim and not SIGKILL: a killed process's writes are already in the page cache, which
//! survives it, so kill tests cannot see a missing `fsync`. Why not FUSE: it needs a kernel
//! module and privileges this machine may not give; the shim needs only a C compiler.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

/// One recorded call, with paths relative to the watched root.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// An open that succeeded: the descriptor, the flags as given, the path.
    Open(i32, i32, PathBuf),
    /// Bytes written at an offset through a descriptor.
    Write(i32, u64, Vec<u8>),
    /// `ftruncate` to a length.
    Truncate(i32, u64),
    /// `fsync` or `fdatasync`.
    Sync(i32),
    /// `close`.
    Close(i32),
    /// `rename(from, to)`.
    Rename(PathBuf, PathBuf),
    /// `unlink`.
    Unlink(PathBuf),
    /// `mkdir`.
    Mkdir(PathBuf),
}

/// The calls a program made under `root`, in order.
#[derive(Debug, Clone, Default)]
pub struct Log(pub Vec<Op>);

const O_CREAT: i32 = 0o100;
const O_TRUNC: i32 = 0o1000;

impl Log {
    /// Reads the shim's record for `root`.
    pub fn parse(bytes: &[u8], root: &Path) -> anyhow::Result<Self> {
        let relative = |path: &str| -> anyhow::Result<PathBuf> {
            let path = Path::new(path).strip_prefix(root)?;
            Ok(path
                .components()
                .filter(|c| *c != Component::CurDir)
                .collect())
        };
        let mut ops = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .context("a record without its end")?;
            let line = std::str::from_utf8(&rest[..end])?;
            rest = &rest[end + 1..];
            let fields: Vec<&str> = line.split('\t').collect();
            let int = |i: usize| -> anyhow::Result<i64> {
                Ok(fields.get(i).context("a short record")?.parse()?)
            };
            ops.push(match fields[0] {
                "O" => Op::Open(int(1)? as i32, int(2)? as i32, relative(fields[3])?),
                "W" => {
                    let len = int(3)? as usize;
                    ensure!(rest.len() >= len, "a write record without its bytes");
                    let (data, after) = rest.split_at(len);
                    rest = after;
                    Op::Write(int(1)? as i32, int(2)? as u64, data.to_vec())
                }
                "T" => Op::Truncate(int(1)? as i32, int(2)? as u64),
                "S" => Op::Sync(int(1)? as i32),
                "C" => Op::Close(int(1)? as i32),
                "R" => Op::Rename(relative(fields[1])?, relative(fields[2])?),
                "U" => Op::Unlink(relative(fields[1])?),
                "M" => Op::Mkdir(relative(fields[1])?),
                other => bail!("unknown record {other:?}"),
            });
        }
        Ok(Self(ops))
    }

    /// The path an op works on (a descriptor's, as it was opened; a rename's target).
    pub fn paths(&self) -> Vec<Option<PathBuf>> {
        let mut fds: HashMap<i32, PathBuf> = HashMap::new();
        let mut out = Vec::with_capacity(self.0.len());
        for op in &self.0 {
            out.push(match op {
                Op::Open(fd, _, path) => {
                    fds.insert(*fd, path.clone());
                    Some(path.clone())
                }
                Op::Write(fd, ..) | Op::Truncate(fd, _) | Op::Sync(fd) => fds.get(fd).cloned(),
                Op::Close(fd) => fds.remove(fd),
                Op::Rename(_, to) => Some(to.clone()),
                Op::Unlink(path) | Op::Mkdir(path) => Some(path.clone()),
            });
        }
        out
    }
}

/// A directory entry: a file (an inode number) or a directory (its path).
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    File(usize),
    Dir(PathBuf),
}

/// A file's bytes as the program sees them, and as a power cut would leave them.
#[derive(Debug, Clone, Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
}

/// A directory's entries as the program sees them, and as a power cut would leave them.
#[derive(Debug, Clone, Default)]
struct Directory {
    live: BTreeMap<String, Entry>,
    durable: BTreeMap<String, Entry>,
}

/// What an open descriptor names.
#[derive(Debug, Clone)]
enum Handle {
    File(usize),
    Dir(PathBuf),
}

/// The watched tree, replayed call by call (it starts empty and durable).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    inodes: Vec<Inode>,
    dirs: HashMap<PathBuf, Directory>,
    fds: HashMap<i32, Handle>,
}

fn split(path: &Path) -> anyhow::Result<(PathBuf, String)> {
    let name = path.file_name().context("a path without a name")?;
    let parent = path.parent().unwrap_or(Path::new("")).to_owned();
    Ok((parent, name.to_string_lossy().into_owned()))
}

impl Disk {
    /// An empty tree.
    pub fn new() -> Self {
        let mut disk = Self::default();
        disk.dirs.insert(PathBuf::new(), Directory::default());
        disk
    }

    fn dir(&mut self, path: &Path) -> anyhow::Result<&mut Directory> {
        self.dirs
            .get_mut(path)
            .with_context(|| format!("no directory {}", path.display()))
    }

    fn lookup(&self, path: &Path) -> Option<Entry> {
        let (parent, name) = split(path).ok()?;
        self.dirs.get(&parent)?.live.get(&name).cloned()
    }

    fn inode(&mut self, fd: i32) -> anyhow::Result<&mut Inode> {
        match self.fds.get(&fd) {
            Some(Handle::File(inode)) => Ok(&mut self.inodes[*inode]),
            _ => bail!("descriptor {fd} is not an open file"),
        }
    }

    /// Replays one call.
    pub fn apply(&mut self, op: &Op) -> anyhow::Result<()> {
        match op {
            Op::Open(fd, flags, path) => {
                let handle = match self.lookup(path) {
                    Some(Entry::Dir(dir)) => Handle::Dir(dir),
                    Some(Entry::File(inode)) => {
                        if flags & O_TRUNC != 0 {
                            self.inodes[inode].data.clear();
                        }
                        Handle::File(inode)
                    }
                    None if path.as_os_str().is_empty() => Handle::Dir(PathBuf::new()),
                    None => {
                        ensure!(
                            flags & O_CREAT != 0,
                            "{} opened but missing",
                            path.display()
                        );
                        self.inodes.push(Inode::default());
                        let inode = self.inodes.len() - 1;
                        let (parent, name) = split(path)?;
                        self.dir(&parent)?.live.insert(name, Entry::File(inode));
                        Handle::File(inode)
                    }
                };
                self.fds.insert(*fd, handle);
            }
            Op::Write(fd, offset, bytes) => {
                let data = &mut self.inode(*fd)?.data;
                let end = *offset as usize + bytes.len();
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[*offset as usize..end].copy_from_slice(bytes);
            }
            Op::Truncate(fd, len) => self.inode(*fd)?.data.resize(*len as usize, 0),
            Op::Sync(fd) => match self.fds.get(fd).cloned() {
                Some(Handle::File(inode)) => {
                    let inode = &mut self.inodes[inode];
                    inode.durable = inode.data.clone();
                }
                Some(Handle::Dir(path)) => {
                    let dir = self.dir(&path)?;
                    dir.durable = dir.live.clone();
                }
                None => bail!("fsync of descriptor {fd}, which is not open"),
            },
            Op::Close(fd) => {
                self.fds.remove(fd);
            }
            Op::Rename(from, to) => {
                let (from_parent, from_name) = split(from)?;
                let entry = (self.dir(&from_parent)?.live.remove(&from_name))
                    .with_context(|| format!("renamed {} is missing", from.display()))?;
                let (to_parent, to_name) = split(to)?;
                self.dir(&to_parent)?.live.insert(to_name, entry);
            }
            Op::Unlink(path) => {
                let (parent, name) = split(path)?;
                self.dir(&parent)?.live.remove(&name);
            }
            Op::Mkdir(path) => {
                let (parent, name) = split(path)?;
                self.dir(&parent)?
                    .live
                    .insert(name, Entry::Dir(path.clone()));
                self.dirs.insert(path.clone(), Directory::default());
            }
        }
        Ok(())
    }

    /// The tree a power cut now would leave, as relative paths and file bytes (directories
    /// with a trailing entry of their own and no bytes).
    pub fn surviving(&self) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut pending = vec![PathBuf::new()];
        while let Some(dir) = pending.pop() {
            let Some(directory) = self.dirs.get(&dir) else {
                continue;
            };
            for (name, entry) in &directory.durable {
                let path = dir.join(name);
                match entry {
                    Entry::File(inode) => {
                        out.push((path, Some(self.inodes[*inode].durable.clone())))
                    }
                    Entry::Dir(d) => {
                        out.push((path, None));
                        pending.push(d.clone());
                    }
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Writes the tree a power cut now would leave into `dir` (which exists and is empty).
    pub fn materialize(&self, dir: &Path) -> anyhow::Result<()> {
        for (path, bytes) in self.surviving() {
            match bytes {
                None => std::fs::create_dir(dir.join(&path))?,
                Some(bytes) => std::fs::write(dir.join(&path), bytes)?,
            }
        }
        Ok(())
    }
}

/// The shim's C source, built in: a path into this crate's checkout would go stale where the
/// shared target dir holds a build of it made in another checkout.
const SHIM_SOURCE: &str = include_str!("../powerloss/shim.c");

/// Compiles the shim into `dir`; `None` (with the reason) where there is no C compiler.
pub fn build_shim(dir: &Path) -> anyhow::Result<Result<PathBuf, String>> {
    let source = dir.join("powerloss_shim.c");
    std::fs::write(&source, SHIM_SOURCE)?;
    let out = dir.join("libpowerloss.so");
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&source)
        .args(["-ldl", "-lpthread"])
        .output();
    match built {
        Err(e) => Ok(Err(format!("no C compiler `{compiler}` ({e})"))),
        Ok(o) if !o.status.success() => {
            bail!(
                "the shim does not compile:\n{}",
                String::from_utf8_lossy(&o.stderr)
            )
        }
        Ok(_) => Ok(Ok(out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// The atomic protocol: temporary file, fsync, rename, directory fsync.
    fn atomic(name: &str, fd: i32, bytes: &[u8]) -> Vec<Op> {
        let tmp = format!("d/.{name}.tmp");
        vec![
            Op::Open(fd, O_CREAT | O_TRUNC, p(&tmp)),
            Op::Write(fd, 0, bytes.to_vec()),
            Op::Sync(fd),
            Op::Close(fd),
            Op::Rename(p(&tmp), p(&format!("d/{name}"))),
            Op::Open(fd, 0, p("d")),
            Op::Sync(fd),
            Op::Close(fd),
        ]
    }

    fn files_after(ops: &[Op]) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut disk = Disk::new();
        for op in ops {
            disk.apply(op).unwrap();
        }
        disk.surviving()
    }

    #[test]
    fn only_what_was_synced_survives() {
        let mut ops = vec![
            Op::Mkdir(p("d")),
            Op::Open(3, 0, p("")),
            Op::Sync(3),
            Op::Close(3),
        ];
        ops.extend(atomic("a.ckpt", 4, b"first"));
        let done = files_after(&ops);
        assert_eq!(
            done,
            [(p("d"), None), (p("d/a.ckpt"), Some(b"first".to_vec()))]
        );
        // Before the directory fsync neither the new name nor the temporary's is there.
        assert_eq!(files_after(&ops[..ops.len() - 2]), [(p("d"), None)]);
        // A second write replaces the first only once its rename is synced.
        let mut second = ops.clone();
        second.extend(atomic("a.ckpt", 5, b"second"));
        let cut = files_after(&second[..second.len() - 2]);
        assert_eq!(cut, done);
        assert_eq!(files_after(&second)[1].1.as_deref(), Some(&b"second"[..]));
        // A directory made but never synced into its parent is lost with all it holds.
        let mut unsynced = vec![Op::Mkdir(p("d"))];
        unsynced.extend(atomic("a.ckpt", 4, b"first"));
        assert_eq!(files_after(&unsynced), []);
    }

    #[test]
    fn a_file_written_in_place_without_fsync_is_empty_after_the_cut() {
        let ops = [
            Op::Open(3, O_CREAT, p("f")),
            Op::Write(3, 0, b"data".to_vec()),
            Op::Open(4, 0, p("")),
            Op::Sync(4),
        ];
        assert_eq!(files_after(&ops), [(p("f"), Some(Vec::new()))]);
    }
}
