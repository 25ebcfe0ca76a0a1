//! Transforms of one item, chained with [`Transform::then`]: the image augmentations of
//! torchvision's v1 transforms (same parameters and semantics; the random draws come from the
//! generator passed in, not torch's), and [`ToTensor`] / [`Normalize`] to floats. A user's own
//! transform implements [`Transform`] (or is a closure `Fn(I, &mut StdRng) -> Result<O>`).

use burn::tensor::TensorData;
use rand::RngExt;
use rand::rngs::StdRng;

use super::Image;

/// One step of making an item: takes `I`, gives [`Output`](Self::Output), drawing any
/// randomness from `rng`.
pub trait Transform<I>: Send + Sync {
    /// What the transform gives.
    type Output;

    /// Transforms `input`.
    fn apply(&self, input: I, rng: &mut StdRng) -> anyhow::Result<Self::Output>;

    /// This transform, then `next` on its output.
    fn then<T: Transform<Self::Output>>(self, next: T) -> Then<Self, T>
    where
        Self: Sized,
    {
        Then(self, next)
    }
}

impl<I, O, F> Transform<I> for F
where
    F: Fn(I, &mut StdRng) -> anyhow::Result<O> + Send + Sync,
{
    type Output = O;

    fn apply(&self, input: I, rng: &mut StdRng) -> anyhow::Result<O> {
        self(input, rng)
    }
}

/// Two transforms, one after the other ([`Transform::then`]).
#[derive(Debug, Clone)]
pub struct Then<A, B>(A, B);

impl<I, A: Transform<I>, B: Transform<A::Output>> Transform<I> for Then<A, B> {
    type Output = B::Output;

    fn apply(&self, input: I, rng: &mut StdRng) -> anyhow::Result<B::Output> {
        self.1.apply(self.0.apply(input, rng)?, rng)
    }
}

/// A `size × size` window at a uniformly drawn place, after padding every side with `padding`
/// rows and columns of zeros (torchvision's `RandomCrop(size, padding)`).
#[derive(Debug, Clone, Copy)]
pub struct RandomCrop {
    size: usize,
    padding: usize,
}

impl RandomCrop {
    /// Square windows of `size` pixels, no padding.
    pub fn new(size: usize) -> Self {
        Self { size, padding: 0 }
    }

    /// Pads every side with `pixels` rows or columns of zeros first.
    pub fn padding(mut self, pixels: usize) -> Self {
        self.padding = pixels;
        self
    }
}

impl Transform<Image> for RandomCrop {
    type Output = Image;

    fn apply(&self, image: Image, rng: &mut StdRng) -> anyhow::Result<Image> {
        let (p, size) = (self.padding, self.size);
        let (h, w) = (image.height + 2 * p, image.width + 2 * p);
        anyhow::ensure!(
            size <= h && size <= w,
            "RandomCrop({size}) of a {}×{} image padded by {p}: the window is larger",
            image.width,
            image.height
        );
        let top = rng.random_range(0..=h - size) as isize - p as isize;
        let left = rng.random_range(0..=w - size) as isize - p as isize;
        Ok(image.crop(top, left, size, size))
    }
}

/// The centre `size × size` window (torchvision's `CenterCrop`; zeros where the image is
/// smaller).
#[derive(Debug, Clone, Copy)]
pub struct CenterCrop(pub usize);

impl Transform<Image> for CenterCrop {
    type Output = Image;

    fn apply(&self, image: Image, _rng: &mut StdRng) -> anyhow::Result<Image> {
        let centre = |side: usize| ((side as f64 - self.0 as f64) / 2.0).round() as isize;
        Ok(image.crop(centre(image.height), centre(image.width), self.0, self.0))
    }
}

/// The image mirrored left to right with probability `p` (torchvision's
/// `RandomHorizontalFlip(p)`).
#[derive(Debug, Clone, Copy)]
pub struct HorizontalFlip {
    p: f64,
}

impl HorizontalFlip {
    /// Flips with probability `p`.
    pub fn new(p: f64) -> Self {
        Self { p }
    }
}

impl Transform<Image> for HorizontalFlip {
    type Output = Image;

    fn apply(&self, image: Image, rng: &mut StdRng) -> anyhow::Result<Image> {
        Ok(match rng.random::<f64>() < self.p {
            true => image.flipped(),
            false => image,
        })
    }
}

/// The image resampled to `height × width` (torchvision's `Resize((h, w))`, bilinear).
#[derive(Debug, Clone, Copy)]
pub struct Resize {
    /// Rows.
    pub height: usize,
    /// Pixels per row.
    pub width: usize,
}

impl Transform<Image> for Resize {
    type Output = Image;

    fn apply(&self, image: Image, _rng: &mut StdRng) -> anyhow::Result<Image> {
        image.resized(self.height, self.width)
    }
}

/// A window of random area and aspect ratio, resized to `size × size` (torchvision's
/// `RandomResizedCrop(size, scale, ratio)`): up to 10 draws of an area share in `scale` and a
/// log-uniform aspect ratio in `ratio`, the first that fits placed uniformly; else the
/// centre window with the ratio clamped.
#[derive(Debug, Clone, Copy)]
pub struct RandomResizedCrop {
    size: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// Windows resized to `size × size`, of 8% to 100% of the area and ratios 3:4 to 4:3.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
        }
    }

    /// The range of the window's share of the image's area.
    pub fn scale(mut self, low: f64, high: f64) -> Self {
        self.scale = (low, high);
        self
    }

    /// The range of the window's width / height.
    pub fn ratio(mut self, low: f64, high: f64) -> Self {
        self.ratio = (low, high);
        self
    }

    /// The window (top, left, height, width) for an image of `height × width`.
    pub(super) fn window(
        &self,
        height: usize,
        width: usize,
        rng: &mut StdRng,
    ) -> (usize, usize, usize, usize) {
        let area = (height * width) as f64;
        let (log_low, log_high) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..10 {
            let target = area * uniform(rng, self.scale);
            let aspect = uniform(rng, (log_low, log_high)).exp();
            let w = (target * aspect).sqrt().round() as usize;
            let h = (target / aspect).sqrt().round() as usize;
            if 0 < w && w <= width && 0 < h && h <= height {
                let top = rng.random_range(0..=height - h);
                let left = rng.random_range(0..=width - w);
                return (top, left, h, w);
            }
        }
        let in_ratio = width as f64 / height as f64;
        let (h, w) = if in_ratio < self.ratio.0 {
            ((width as f64 / self.ratio.0).round() as usize, width)
        } else if in_ratio > self.ratio.1 {
            (height, (height as f64 * self.ratio.1).round() as usize)
        } else {
            (height, width)
        };
        ((height - h) / 2, (width - w) / 2, h, w)
    }
}

/// A uniform draw in [`range.0`, `range.1`).
fn uniform(rng: &mut StdRng, range: (f64, f64)) -> f64 {
    range.0 + (range.1 - range.0) * rng.random::<f64>()
}

impl Transform<Image> for RandomResizedCrop {
    type Output = Image;

    fn apply(&self, image: Image, rng: &mut StdRng) -> anyhow::Result<Image> {
        let (top, left, h, w) = self.window(image.height, image.width, rng);
        let window = image.crop(top as isize, left as isize, h, w);
        window.resized(self.size, self.size)
    }
}

/// The input as it is (torchvision's `Identity`): the start of a chain that adds nothing, where
/// one is asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl<I> Transform<I> for Identity {
    type Output = I;

    fn apply(&self, input: I, _rng: &mut StdRng) -> anyhow::Result<I> {
        Ok(input)
    }
}

/// The image as floats in [0, 1], channels first (torchvision's `ToTensor`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ToTensor;

impl Transform<Image> for ToTensor {
    type Output = TensorData;

    fn apply(&self, image: Image, _rng: &mut StdRng) -> anyhow::Result<TensorData> {
        Ok(image.to_tensor_data())
    }
}

/// `(x - mean[c]) / std[c]` for every value of channel `c` of a channels-first array
/// (torchvision's `Normalize`).
#[derive(Debug, Clone)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// One mean and one deviation per channel.
    pub fn new(mean: impl Into<Vec<f32>>, std: impl Into<Vec<f32>>) -> Self {
        Self {
            mean: mean.into(),
            std: std.into(),
        }
    }
}

impl Transform<TensorData> for Normalize {
    type Output = TensorData;

    fn apply(&self, data: TensorData, _rng: &mut StdRng) -> anyhow::Result<TensorData> {
        let shape = data.shape.to_vec();
        let channels = shape.first().copied().unwrap_or(0);
        anyhow::ensure!(
            channels == self.mean.len() && channels == self.std.len(),
            "Normalize has {} means and {} deviations for an array of {channels} channels \
             (shape {shape:?})",
            self.mean.len(),
            self.std.len()
        );
        let mut values = (data.convert::<f32>().into_vec::<f32>())
            .map_err(|e| anyhow::anyhow!("Normalize: {e:?}"))?;
        let plane = values.len() / channels.max(1);
        for (c, chunk) in values.chunks_mut(plane.max(1)).enumerate() {
            let (mean, std) = (self.mean[c], self.std[c]);
            chunk.iter_mut().for_each(|v| *v = (*v - mean) / std);
        }
        Ok(TensorData::new(values, shape))
    }
}
