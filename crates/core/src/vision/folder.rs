//! [`ImageFolder`]: a data source of images kept one folder per class.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::Image;
use crate::trainer::data::{DataSource, ItemKey};

/// The images under `root`, one sub-folder per class (`root/cat/001.png`, `root/dog/a.jpg`),
/// as torchvision's `ImageFolder` reads them: classes are the sub-folders' names in sorted
/// order (class `i` is the `i`-th), items the PNG and JPEG files in sorted path order. Item `i`
/// is the decoded RGB image and its class; a file that does not decode is an error naming it.
#[derive(Debug, Clone)]
pub struct ImageFolder {
    root: PathBuf,
    classes: Vec<String>,
    files: Vec<(PathBuf, i64)>,
}

/// Whether `path` names a PNG or JPEG file by its extension.
fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["png", "jpg", "jpeg"].contains(&e.to_ascii_lowercase().as_str()))
}

/// The entries of the folder `dir`, sorted; an error names the folder.
fn sorted_entries(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let read = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut paths = read
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("reading {}", dir.display()))?;
    paths.sort();
    Ok(paths)
}

impl ImageFolder {
    /// Lists the classes and images under `root` (nothing is decoded yet): an error when
    /// `root` cannot be read or holds no class folder with an image.
    pub fn open(root: impl AsRef<Path>) -> anyhow::Result<Self> {
        let root = root.as_ref().to_owned();
        let mut classes = Vec::new();
        let mut files = Vec::new();
        for dir in sorted_entries(&root)?.into_iter().filter(|p| p.is_dir()) {
            let label = classes.len() as i64;
            let images: Vec<PathBuf> = (sorted_entries(&dir)?.into_iter())
                .filter(|p| p.is_file() && is_image(p))
                .collect();
            if images.is_empty() {
                continue;
            }
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
            classes.push(name.unwrap_or_default());
            files.extend(images.into_iter().map(|p| (p, label)));
        }
        anyhow::ensure!(
            !files.is_empty(),
            "no images in {}: expected one folder per class holding .png or .jpg files",
            root.display()
        );
        Ok(Self {
            root,
            classes,
            files,
        })
    }

    /// The folder the images are under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The class names, in label order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The file of item `index` and its class, if there is such an item.
    pub fn file(&self, index: usize) -> Option<(&Path, i64)> {
        self.files.get(index).map(|(p, c)| (p.as_path(), *c))
    }
}

impl DataSource<(Image, i64)> for ImageFolder {
    fn len(&self) -> usize {
        self.files.len()
    }

    fn get(&self, key: ItemKey) -> anyhow::Result<(Image, i64)> {
        let (path, class) = self
            .file(key.index)
            .with_context(|| format!("{} has no item {}", self.root.display(), key.index))?;
        Ok((Image::open(path)?, class))
    }
}
