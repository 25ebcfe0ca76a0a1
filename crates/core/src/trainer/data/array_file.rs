//! [`ArrayFile`]: samples preprocessed into one `.npy` array, memory-mapped.

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::tensor::TensorData;
use memmap2::Mmap;

use super::source::{DataSource, ItemKey};

/// The element types an [`ArrayFile`] reads, by their `.npy` type string (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dtype {
    F32,
    F64,
    U8,
    U16,
    I32,
    I64,
}

impl Dtype {
    fn parse(descr: &str) -> Option<Self> {
        Some(match descr {
            "<f4" => Self::F32,
            "<f8" => Self::F64,
            "|u1" | "<u1" => Self::U8,
            "<u2" => Self::U16,
            "<i4" => Self::I32,
            "<i8" => Self::I64,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U16 => 2,
            Self::F32 | Self::I32 => 4,
            Self::F64 | Self::I64 => 8,
        }
    }
}

/// A `.npy` file (numpy's format: `np.save("train_x.npy", array)`) of samples along its first
/// axis, memory-mapped: item `i` is `array[i]`, read from the file when it is asked for, as
/// `TensorData` of the remaining shape (an image `[3, 32, 32]`, a window of tokens, a class
/// `[]`). The file is never loaded whole, so it can be larger than memory. Little-endian `f32`,
/// `f64`, `u8`, `u16`, `i32` and `i64` arrays in C order are read; anything else, and a file
/// shorter than its header says, is an error naming the file when it is opened.
#[derive(Debug)]
pub struct ArrayFile {
    path: PathBuf,
    map: Mmap,
    dtype: Dtype,
    /// The shape of one item (the array's shape without its first axis).
    item_shape: Vec<usize>,
    items: usize,
    /// Where the data starts in the file.
    offset: usize,
}

/// The value of `key` in a `.npy` header dict (`{'descr': '<f4', 'fortran_order': False,
/// 'shape': (100, 3), }`), up to the next top-level comma.
fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = match rest.starts_with('(') {
        true => rest.find(')')? + 1,
        false => rest.find([',', '}'])?,
    };
    Some(rest[..end].trim())
}

impl ArrayFile {
    /// Maps the file at `path` and reads its header.
    pub fn open(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref().to_owned();
        let named = |what: &str| format!("{}: {what}", path.display());
        let file = std::fs::File::open(&path).with_context(|| named("cannot open"))?;
        // SAFETY: the map is read-only; a file changed underneath while mapped gives other bytes,
        // never memory unsafety in safe code reading them as plain numbers.
        let map = unsafe { Mmap::map(&file) }.with_context(|| named("cannot map"))?;
        anyhow::ensure!(
            map.starts_with(b"\x93NUMPY") && map.len() >= 10,
            named("not a .npy file")
        );
        let (header_len, start) = match map[6] {
            1 => (usize::from(u16::from_le_bytes([map[8], map[9]])), 10),
            2 | 3 if map.len() >= 12 => {
                let len = u32::from_le_bytes([map[8], map[9], map[10], map[11]]);
                (len as usize, 12)
            }
            version => anyhow::bail!(named(&format!("unknown .npy version {version}"))),
        };
        let header = map
            .get(start..start + header_len)
            .and_then(|h| std::str::from_utf8(h).ok())
            .with_context(|| named("the header is cut short or not text"))?;
        let field = |key: &str| {
            header_value(header, key).with_context(|| named(&format!("no '{key}' in the header")))
        };
        let descr = field("descr")?.trim_matches(['\'', '"']);
        let dtype = Dtype::parse(descr).with_context(|| {
            named(&format!(
                "elements of type {descr} (f4, f8, u1, u2, i4 or i8, little-endian, can be read)"
            ))
        })?;
        anyhow::ensure!(
            field("fortran_order")? == "False",
            named("the array is in Fortran order (save it with np.ascontiguousarray)")
        );
        let shape = field("shape")?.trim_matches(['(', ')']);
        let shape: Vec<usize> = (shape.split(',').map(str::trim).filter(|d| !d.is_empty()))
            .map(|d| {
                d.parse()
                    .with_context(|| named(&format!("a shape of ({shape})")))
            })
            .collect::<anyhow::Result<_>>()?;
        let (&items, item_shape) = shape
            .split_first()
            .with_context(|| named("a 0-dimensional array has no items"))?;
        let offset = start + header_len;
        let needed = offset + items * item_shape.iter().product::<usize>() * dtype.size();
        anyhow::ensure!(
            map.len() >= needed,
            named(&format!(
                "{} bytes, but its header describes {needed}",
                map.len()
            ))
        );
        Ok(Self {
            item_shape: item_shape.to_vec(),
            path,
            map,
            dtype,
            items,
            offset,
        })
    }

    /// The shape of one item.
    pub fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Item `index`, or `None` past the end.
    pub fn item(&self, index: usize) -> Option<TensorData> {
        if index >= self.items {
            return None;
        }
        let count: usize = self.item_shape.iter().product();
        let size = count * self.dtype.size();
        let bytes = &self.map[self.offset + index * size..][..size];
        let shape = self.item_shape.clone();
        fn read<const N: usize, T>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
            (bytes.chunks_exact(N))
                .map(|c| from(c.try_into().expect("chunks of N bytes")))
                .collect()
        }
        Some(match self.dtype {
            Dtype::F32 => TensorData::new(read(bytes, f32::from_le_bytes), shape),
            Dtype::F64 => TensorData::new(read(bytes, f64::from_le_bytes), shape),
            Dtype::U8 => TensorData::new(bytes.to_vec(), shape),
            Dtype::U16 => TensorData::new(read(bytes, u16::from_le_bytes), shape),
            Dtype::I32 => TensorData::new(read(bytes, i32::from_le_bytes), shape),
            Dtype::I64 => TensorData::new(read(bytes, i64::from_le_bytes), shape),
        })
    }
}

impl DataSource<TensorData> for ArrayFile {
    fn len(&self) -> usize {
        self.items
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<TensorData> {
        self.item(key.index).with_context(|| {
            format!(
                "{} has {} items, not {}",
                self.path.display(),
                self.items,
                key.index + 1
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 `.npy` file of `data` with this type string, order and shape.
    fn npy(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let order = if fortran { "True" } else { "False" };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend((header.len() as u16).to_le_bytes());
        file.extend(header.as_bytes());
        file.extend(data);
        file
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn items_are_slices_along_the_first_axis() {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<f32> = (0..24).map(|v| v as f32 * 0.5).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let path = write(dir.path(), "x.npy", &npy("<f4", false, "(4, 2, 3)", &bytes));
        let file = ArrayFile::open(&path).unwrap();
        assert_eq!((file.len(), file.item_shape()), (4, &[2, 3][..]));
        let item = file.item(2).unwrap();
        assert_eq!(item.shape.as_slice(), [2, 3]);
        assert_eq!(item.to_vec::<f32>().unwrap(), values[12..18]);
        let key = ItemKey {
            seed: 0,
            epoch: 0,
            index: 4,
        };
        let err = file.get(key).unwrap_err().to_string();
        assert!(err.contains("has 4 items, not 5"), "{err}");
        // One label per item: items of shape [].
        let path = write(dir.path(), "y.npy", &npy("|u1", false, "(3,)", &[7, 8, 9]));
        let labels = ArrayFile::open(&path).unwrap();
        assert_eq!(labels.item(1).unwrap().to_vec::<u8>().unwrap(), [8]);
        let longs: Vec<u8> = [5i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let path = write(dir.path(), "z.npy", &npy("<i8", false, "(2,)", &longs));
        assert_eq!(
            ArrayFile::open(&path)
                .unwrap()
                .item(1)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            [-1]
        );
    }

    #[test]
    fn a_file_that_is_not_what_its_header_says_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "short.npy",
                npy("<f4", false, "(4, 2)", &[0; 31]),
                "159 bytes, but its header describes 160",
            ),
            (
                "fortran.npy",
                npy("<f4", true, "(2, 2)", &[0; 16]),
                "Fortran order",
            ),
            (
                "complex.npy",
                npy("<c8", false, "(2,)", &[0; 16]),
                "elements of type <c8",
            ),
            (
                "scalar.npy",
                npy("<f4", false, "()", &[0; 4]),
                "0-dimensional",
            ),
            ("text.npy", b"hello, world".to_vec(), "not a .npy file"),
        ];
        for (name, bytes, want) in cases {
            let path = write(dir.path(), name, &bytes);
            let err = format!("{:#}", ArrayFile::open(&path).unwrap_err());
            assert!(err.contains(name) && err.contains(want), "{name}: {err}");
        }
    }
}
