//! [`Shards`]: a corpus kept in many files and read record by record as the loader asks for
//! them, so it can be far larger than memory. A [`ShardFormat`] says how a file holds its
//! records; [`TokenWindows`] reads flat files of token ids.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;

use super::source::{DataSource, ItemKey};

/// How a shard file holds its records: how many there are (known without reading them) and
/// how to read one. Implement it for a format of your own.
pub trait ShardFormat: Send + Sync + 'static {
    /// One record.
    type Record;

    /// The records in `file` (opened from `path`), from its length or its header. A file that
    /// cannot hold what it should (a truncated shard) is an error.
    fn records(&self, path: &Path, file: &File) -> anyhow::Result<usize>;

    /// Record `index` of `file`.
    fn read(&self, file: &File, index: usize) -> anyhow::Result<Self::Record>;
}

/// Flat files of little-endian token ids (nanoGPT's `train.bin`, written with numpy's
/// `np.array(ids, dtype=np.uint16).tofile(path)`), cut into windows of `window` tokens that
/// start every `stride` tokens; each window is a record of `u32` ids. The tokens after a
/// shard's last whole window are left out.
#[derive(Debug, Clone, Copy)]
pub struct TokenWindows {
    window: usize,
    stride: usize,
    bytes: usize,
}

impl TokenWindows {
    /// Windows of `window` `u16` tokens, one after the other.
    pub fn u16(window: usize) -> Self {
        Self {
            window,
            stride: window,
            bytes: 2,
        }
    }

    /// Windows of `window` `u32` tokens, one after the other.
    pub fn u32(window: usize) -> Self {
        Self {
            bytes: 4,
            ..Self::u16(window)
        }
    }

    /// Windows that start every `stride` tokens (a language model's windows of `context + 1`
    /// tokens start every `context`, so that each token is a target once).
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }
}

impl ShardFormat for TokenWindows {
    type Record = Vec<u32>;

    fn records(&self, _path: &Path, file: &File) -> anyhow::Result<usize> {
        anyhow::ensure!(
            self.window > 0 && self.stride > 0,
            "token windows of {} tokens every {} tokens: both must be > 0",
            self.window,
            self.stride
        );
        let len = file.metadata()?.len() as usize;
        anyhow::ensure!(
            len.is_multiple_of(self.bytes),
            "{len} bytes is not a whole number of {}-byte tokens (a truncated shard?)",
            self.bytes
        );
        let tokens = len / self.bytes;
        Ok(match tokens >= self.window {
            true => (tokens - self.window) / self.stride + 1,
            false => 0,
        })
    }

    fn read(&self, file: &File, index: usize) -> anyhow::Result<Vec<u32>> {
        let mut bytes = vec![0; self.window * self.bytes];
        let at = (index * self.stride * self.bytes) as u64;
        file.read_exact_at(&mut bytes, at)
            .with_context(|| format!("reading window {index} at byte {at}"))?;
        Ok(match self.bytes {
            2 => (bytes.chunks_exact(2))
                .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
                .collect(),
            _ => (bytes.chunks_exact(4))
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })
    }
}

/// Shard files held open at most; others are opened again when they are read.
const OPEN_FILES: usize = 16;

/// A corpus in shard files of one [`ShardFormat`], in the order given: record `i` of the corpus
/// is read from its file when a loader asks for it, and nothing else is kept in memory but a
/// few open files. `Loader::from_shards` batches it in a streaming order (whole shards in a
/// seeded order, each rank its own run of them, through a shuffle buffer).
pub struct Shards<F: ShardFormat> {
    format: F,
    paths: Vec<PathBuf>,
    /// The corpus index of each shard's first record, and the corpus's length last.
    starts: Arc<[usize]>,
    /// Recently read shards' files, the most recent last.
    open: Mutex<Vec<(usize, Arc<File>)>>,
}

impl<F: ShardFormat> Shards<F> {
    /// The shards at `paths`, in that order; each is opened and counted now, so a missing or
    /// truncated file is an error naming it before anything trains.
    pub fn open<P: Into<PathBuf>>(
        paths: impl IntoIterator<Item = P>,
        format: F,
    ) -> anyhow::Result<Self> {
        let paths: Vec<PathBuf> = paths.into_iter().map(Into::into).collect();
        let mut starts = vec![0];
        for path in &paths {
            let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let records = (format.records(path, &file))
                .with_context(|| format!("reading the shard {}", path.display()))?;
            starts.push(starts.last().copied().unwrap_or(0) + records);
        }
        Ok(Self {
            format,
            paths,
            starts: starts.into(),
            open: Mutex::new(Vec::new()),
        })
    }

    /// The files of `dir` whose names end in `suffix` (`".bin"`), in name order; a folder
    /// without one is an error naming it.
    pub fn in_dir(dir: impl AsRef<Path>, suffix: &str, format: F) -> anyhow::Result<Self> {
        let dir = dir.as_ref();
        let listed = std::fs::read_dir(dir)
            .with_context(|| format!("listing the shard folder {}", dir.display()))?;
        let mut paths = Vec::new();
        for entry in listed {
            let path = entry?.path();
            if path.is_file() && path.to_string_lossy().ends_with(suffix) {
                paths.push(path);
            }
        }
        anyhow::ensure!(
            !paths.is_empty(),
            "the shard folder {} holds no file named *{suffix}",
            dir.display()
        );
        paths.sort();
        Self::open(paths, format)
    }

    /// The shard files, in corpus order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The corpus index of each shard's first record, and the corpus's length last.
    pub(crate) fn starts(&self) -> Arc<[usize]> {
        Arc::clone(&self.starts)
    }

    /// Shard `shard`'s file, opened again if it is not among the recently read.
    fn file(&self, shard: usize) -> anyhow::Result<Arc<File>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = open.iter().position(|(s, _)| *s == shard) {
            let entry = open.remove(at);
            open.push(entry);
        } else {
            let path = &self.paths[shard];
            let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
            if open.len() == OPEN_FILES {
                open.remove(0);
            }
            open.push((shard, Arc::new(file)));
        }
        Ok(Arc::clone(&open.last().expect("just pushed").1))
    }
}

impl<F: ShardFormat> DataSource<F::Record> for Shards<F> {
    fn len(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<F::Record> {
        anyhow::ensure!(
            key.index < self.len(),
            "the shards hold {} records, not {}",
            self.len(),
            key.index + 1
        );
        let shard = self.starts.partition_point(|&start| start <= key.index) - 1;
        let index = key.index - self.starts[shard];
        let path = &self.paths[shard];
        (self.format.read(&*self.file(shard)?, index))
            .with_context(|| format!("reading record {index} of {}", path.display()))
    }
}
