//! `images prepare DIR`: a folder of 32×32 RGB PNGs, one sub-folder per class, drawn from the
//! shipped 8×8 digits (nothing can be downloaded here): each image is a digit scaled up three
//! times in a colour of its own on a background of its own, placed at a random offset, with
//! noise. `DIR/train` is drawn from the digits' training split and `DIR/val` from its
//! validation split, so no digit is in both.

use std::path::Path;

use anyhow::Context;
use digits::data::{DigitItem, Digits};
use ember::vision::Image;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The side of every image.
pub const SIDE_OUT: usize = 32;

/// The side of a digit (8×8).
const SIDE: usize = 8;

/// How many images `prepare` writes by default.
pub const TRAIN_IMAGES: usize = 20_000;
/// Validation images by default.
pub const VAL_IMAGES: usize = 2_000;

/// Draws `digit` as a 32×32 RGB image with colours, offset and noise from `rng`.
fn draw(digit: &DigitItem, rng: &mut StdRng) -> anyhow::Result<Image> {
    let gray: Vec<u8> = (digit.pixels.iter())
        .map(|&v| (v * 255.0).round() as u8)
        .collect();
    let scaled = Image::new(SIDE, SIDE, 1, gray)?.resized(3 * SIDE, 3 * SIDE)?;
    let colour = |low: u8, high: u8, rng: &mut StdRng| -> [f32; 3] {
        [0; 3].map(|_: u8| f32::from(rng.random_range(low..=high)))
    };
    let (ink, paper) = (colour(120, 255, rng), colour(0, 90, rng));
    let room = SIDE_OUT - 3 * SIDE;
    let (top, left) = (rng.random_range(0..=room), rng.random_range(0..=room));
    let mut pixels = Vec::with_capacity(SIDE_OUT * SIDE_OUT * 3);
    for row in 0..SIDE_OUT {
        for col in 0..SIDE_OUT {
            let inside =
                (top..top + 3 * SIDE).contains(&row) && (left..left + 3 * SIDE).contains(&col);
            let ink_share = match inside {
                true => f32::from(scaled.pixel(row - top, col - left)[0]) / 255.0,
                false => 0.0,
            };
            for k in 0..3 {
                let noise = rng.random_range(-20.0..20.0);
                let v = paper[k] + (ink[k] - paper[k]) * ink_share + noise;
                pixels.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    Image::new(SIDE_OUT, SIDE_OUT, 3, pixels)
}

/// Writes `count` images drawn from `digits` under `dir/<digit>/NNNNN.png`.
fn write_set(dir: &Path, digits: &[DigitItem], count: usize, seed: u64) -> anyhow::Result<()> {
    anyhow::ensure!(!digits.is_empty(), "no digits to draw");
    let mut rng = StdRng::seed_from_u64(seed);
    for k in 0..count {
        let digit = &digits[k % digits.len()];
        let image = draw(digit, &mut rng)?;
        let class_dir = dir.join(digit.label.to_string());
        std::fs::create_dir_all(&class_dir)
            .with_context(|| format!("creating {}", class_dir.display()))?;
        image.save(class_dir.join(format!("{k:05}.png")))?;
    }
    Ok(())
}

/// Writes `train` training and `val` validation images under `dir`.
pub fn prepare(dir: &Path, train: usize, val: usize) -> anyhow::Result<()> {
    let (train_digits, val_digits) = Digits::shipped()?.split(0.2, 42);
    write_set(&dir.join("train"), &train_digits.items(), train, 1)?;
    write_set(&dir.join("val"), &val_digits.items(), val, 2)
}
