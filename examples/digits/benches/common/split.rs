//! The split the Rust contenders train on, written for the Python side of a benchmark
//! (scripts/bench/vs_lightning.py reads it), so every contender sees the same data.

use std::path::Path;

use digits::train::DataConfig;

/// Writes the 80/20 split `data` makes as `train_x.f32`, `train_y.u8`, `val_x.f32` and
/// `val_y.u8` (little-endian, pixels already scaled) in `dir`; returns the training samples.
pub fn write_split(data: &DataConfig, dir: &Path) -> anyhow::Result<usize> {
    let (train, val) = data.load()?;
    for (name, set) in [("train", &train), ("val", &val)] {
        let pixels: Vec<u8> = set.pixels.iter().flat_map(|p| p.to_le_bytes()).collect();
        std::fs::write(dir.join(format!("{name}_x.f32")), pixels)?;
        std::fs::write(dir.join(format!("{name}_y.u8")), &set.labels)?;
    }
    Ok(train.len())
}
