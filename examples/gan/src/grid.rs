//! A 4×4 grid of 8×8 digits as a PNG, each pixel drawn as a square.

use std::path::Path;

use plotters::prelude::*;

/// Digits in the grid.
pub const COUNT: usize = SIDE * SIDE;
const SIDE: usize = 4;
/// Screen pixels per image pixel.
const SCALE: usize = 8;
const IMAGE: usize = 8;

/// The same noise every epoch (from the golden ratio, no generator's state), so the grids of
/// successive epochs show the same points of the latent space.
pub fn fixed_noise(latent: usize) -> Vec<f32> {
    (0..COUNT * latent)
        .map(|i| ((i as f32 + 1.0) * 0.618_034).fract() * 3.0 - 1.5)
        .collect()
}

/// Writes `pixels` (`COUNT` images of 64 values in 0..1, row-major) to `path`, white digits on
/// black as the data set draws them.
pub fn write(path: &Path, pixels: &[f32]) -> anyhow::Result<()> {
    anyhow::ensure!(
        pixels.len() == COUNT * IMAGE * IMAGE,
        "{} pixels",
        pixels.len()
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let side = (SIDE * IMAGE * SCALE) as u32;
    let root = BitMapBackend::new(path, (side, side)).into_drawing_area();
    for (i, value) in pixels.iter().enumerate() {
        let (image, pixel) = (i / (IMAGE * IMAGE), i % (IMAGE * IMAGE));
        let x = (image % SIDE * IMAGE + pixel % IMAGE) * SCALE;
        let y = (image / SIDE * IMAGE + pixel / IMAGE) * SCALE;
        let level = (value.clamp(0.0, 1.0) * 255.0).round() as u8;
        let square = [
            (x as i32, y as i32),
            ((x + SCALE) as i32, (y + SCALE) as i32),
        ];
        root.draw(&Rectangle::new(
            square,
            RGBColor(level, level, level).filled(),
        ))
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
}
