//! Images for training: [`Image`] (decoded pixels), [`ImageFolder`] (a data source of one
//! folder per class) and the transforms a CIFAR or ImageNet recipe uses, each drawing its
//! randomness from the generator it is given (an item's [`ItemKey::rng`](crate::ItemKey::rng)).
//!
//! ```ignore
//! // docs/data.md's example, compiled in examples/images/tests/folder.rs
//! let augment = RandomCrop::new(32)
//!     .padding(4)
//!     .then(HorizontalFlip::new(0.5))
//!     .then(ToTensor)
//!     .then(Normalize::new([0.49, 0.48, 0.45], [0.25, 0.24, 0.26]));
//! let train = Loader::from_source(ImageFolder::open(root.join("train"))?, 128)
//!     .map(move |(image, class), key| Ok((augment.apply(image, &mut key.rng())?, class)))
//!     .shuffled()
//!     .num_workers(2);
//! ```

mod folder;
mod transforms;

use std::path::Path;

use anyhow::Context;
use burn::tensor::TensorData;

pub use folder::ImageFolder;
pub use transforms::{
    CenterCrop, HorizontalFlip, Identity, Normalize, RandomCrop, RandomResizedCrop, Resize, Then,
    ToTensor, Transform,
};

/// An image in memory: `height` rows of `width` pixels of `channels` bytes each (rows first,
/// channels last, as decoders give them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Bytes per pixel (3 for RGB).
    pub channels: usize,
    /// `height × width × channels` bytes.
    pub pixels: Vec<u8>,
}

impl Image {
    /// An image of these pixels, or an error when their count does not match the size.
    pub fn new(
        width: usize,
        height: usize,
        channels: usize,
        pixels: Vec<u8>,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            pixels.len() == width * height * channels,
            "an image of {width}×{height} pixels of {channels} channels needs {} bytes, not {}",
            width * height * channels,
            pixels.len()
        );
        Ok(Self {
            width,
            height,
            channels,
            pixels,
        })
    }

    /// The PNG or JPEG file at `path`, decoded to RGB; an error names the file.
    pub fn open(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let decoded = image::open(path).with_context(|| format!("decoding {}", path.display()))?;
        Ok(Self::from_rgb(decoded.to_rgb8()))
    }

    /// The `image` crate's RGB image as an [`Image`].
    fn from_rgb(rgb: image::RgbImage) -> Self {
        let (width, height) = (rgb.width() as usize, rgb.height() as usize);
        Self {
            width,
            height,
            channels: 3,
            pixels: rgb.into_raw(),
        }
    }

    /// The bytes of the pixel at (`row`, `col`).
    pub fn pixel(&self, row: usize, col: usize) -> &[u8] {
        let at = (row * self.width + col) * self.channels;
        &self.pixels[at..at + self.channels]
    }

    /// The `height × width` window whose top-left pixel is at (`top`, `left`), which may lie
    /// partly outside the image (there the pixels are 0, as padding).
    pub fn crop(&self, top: isize, left: isize, height: usize, width: usize) -> Self {
        let c = self.channels;
        let mut pixels = vec![0u8; height * width * c];
        for row in 0..height {
            let from = top + row as isize;
            if from < 0 || from >= self.height as isize {
                continue;
            }
            // The columns of this row that fall inside the image.
            let first = (-left).clamp(0, width as isize) as usize;
            let last = (self.width as isize - left).clamp(0, width as isize) as usize;
            if first >= last {
                continue;
            }
            let src = (from as usize * self.width + (left + first as isize) as usize) * c;
            let dst = (row * width + first) * c;
            let len = (last - first) * c;
            pixels[dst..dst + len].copy_from_slice(&self.pixels[src..src + len]);
        }
        Self {
            width,
            height,
            channels: c,
            pixels,
        }
    }

    /// This image mirrored left to right.
    pub fn flipped(mut self) -> Self {
        let c = self.channels;
        for row in self.pixels.chunks_exact_mut(self.width * c) {
            let (mut i, mut j) = (0, self.width.saturating_sub(1));
            while i < j {
                for k in 0..c {
                    row.swap(i * c + k, j * c + k);
                }
                (i, j) = (i + 1, j - 1);
            }
        }
        self
    }

    /// This image resampled to `height × width` with a triangle (bilinear) filter widened when
    /// shrinking, as PIL's bilinear resize does.
    pub fn resized(self, height: usize, width: usize) -> anyhow::Result<Self> {
        if (height, width) == (self.height, self.width) {
            return Ok(self);
        }
        let (w, h, c) = (self.width as u32, self.height as u32, self.channels);
        let (nw, nh) = (width as u32, height as u32);
        let pixels = match c {
            1 => resample::<image::Luma<u8>>((w, h), self.pixels, (nw, nh))?,
            3 => resample::<image::Rgb<u8>>((w, h), self.pixels, (nw, nh))?,
            4 => resample::<image::Rgba<u8>>((w, h), self.pixels, (nw, nh))?,
            _ => anyhow::bail!("resizing an image of {c} channels (1, 3 or 4 can be resized)"),
        };
        Self::new(width, height, c, pixels)
    }

    /// Writes this image to `path` in the format its extension names (PNG, JPEG); 1, 3 or 4
    /// channels.
    pub fn save(&self, path: impl AsRef<Path>) -> anyhow::Result<()> {
        let path = path.as_ref();
        let colour = match self.channels {
            1 => image::ColorType::L8,
            3 => image::ColorType::Rgb8,
            4 => image::ColorType::Rgba8,
            c => anyhow::bail!("saving an image of {c} channels (1, 3 or 4 can be saved)"),
        };
        let (w, h) = (self.width as u32, self.height as u32);
        image::save_buffer(path, &self.pixels, w, h, colour)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The pixels as floats in [0, 1], channels first: `[channels, height, width]` (torchvision's
    /// `ToTensor`).
    pub fn to_tensor_data(&self) -> TensorData {
        let (c, plane) = (self.channels, self.width * self.height);
        let mut values = vec![0f32; c * plane];
        for (i, pixel) in self.pixels.chunks_exact(c).enumerate() {
            for (k, &v) in pixel.iter().enumerate() {
                values[k * plane + i] = f32::from(v) / 255.0;
            }
        }
        TensorData::new(values, [c, self.height, self.width])
    }
}

/// `pixels` of a `w × h` image of pixel type `P`, resampled to `nw × nh` with a triangle filter.
fn resample<P: image::Pixel<Subpixel = u8> + 'static>(
    (w, h): (u32, u32),
    pixels: Vec<u8>,
    (nw, nh): (u32, u32),
) -> anyhow::Result<Vec<u8>> {
    let img = image::ImageBuffer::<P, Vec<u8>>::from_raw(w, h, pixels)
        .context("an image's pixels for its size")?;
    let filter = image::imageops::FilterType::Triangle;
    Ok(image::imageops::resize(&img, nw, nh, filter).into_raw())
}

#[cfg(test)]
mod tests;
