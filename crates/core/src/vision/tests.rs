//! Images, transforms and image folders against what torchvision's do.

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::trainer::data::{DataSource, ItemKey};

/// A `width × height` RGB image whose pixel (r, c) is (r, c, 7).
fn ramp(width: usize, height: usize) -> Image {
    let pixels = (0..height)
        .flat_map(|r| (0..width).flat_map(move |c| [r as u8, c as u8, 7]))
        .collect();
    Image::new(width, height, 3, pixels).unwrap()
}

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

#[test]
fn a_crop_past_the_edges_is_padded_with_zeros() {
    let crop = ramp(4, 3).crop(-1, 2, 3, 3);
    assert_eq!((crop.width, crop.height), (3, 3));
    assert_eq!(crop.pixel(0, 0), [0, 0, 0], "above the image");
    assert_eq!(crop.pixel(1, 0), [0, 2, 7]);
    assert_eq!(crop.pixel(2, 1), [1, 3, 7]);
    assert_eq!(crop.pixel(1, 2), [0, 0, 0], "right of the image");
    assert!(ramp(4, 3).crop(5, 5, 2, 2).pixels.iter().all(|&v| v == 0));
}

#[test]
fn flipping_mirrors_each_row_and_to_tensor_puts_channels_first() {
    let flipped = ramp(3, 2).flipped();
    assert_eq!(flipped.pixel(1, 0), [1, 2, 7]);
    assert_eq!(flipped.pixel(1, 2), [1, 0, 7]);
    let data = ramp(3, 2).to_tensor_data();
    assert_eq!(data.shape.as_slice(), [3, 2, 3]);
    let values = data.to_vec::<f32>().unwrap();
    // Channel 1 holds the column, channel 2 the constant 7, all divided by 255.
    assert_eq!(
        values[6..12],
        [0.0, 1.0, 2.0, 0.0, 1.0, 2.0].map(|v: f32| v / 255.0)
    );
    assert!(values[12..].iter().all(|&v| v == 7.0 / 255.0));
}

#[test]
fn a_random_crop_is_a_window_of_the_padded_image_drawn_from_the_generator() {
    let image = ramp(8, 8);
    let crop = RandomCrop::new(8).padding(2);
    let mut offsets = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let out = crop.apply(image.clone(), &mut rng(seed)).unwrap();
        assert_eq!(out, crop.apply(image.clone(), &mut rng(seed)).unwrap());
        let found = (-2..=2)
            .flat_map(|dy| (-2..=2).map(move |dx| (dy, dx)))
            .find(|&(dy, dx)| image.crop(dy, dx, 8, 8) == out);
        offsets.insert(found.expect("the crop is a shifted window"));
    }
    assert_eq!(offsets.len(), 25, "every place of the window is drawn");
    let err = RandomCrop::new(9).apply(image, &mut rng(0)).unwrap_err();
    assert!(
        err.to_string().contains("RandomCrop(9) of a 8×8 image"),
        "{err}"
    );
}

#[test]
fn a_horizontal_flip_happens_with_its_probability() {
    let image = ramp(5, 2);
    let flips = (0..1000)
        .filter(|&s| {
            HorizontalFlip::new(0.5)
                .apply(image.clone(), &mut rng(s))
                .unwrap()
                != image
        })
        .count();
    assert!((400..600).contains(&flips), "{flips} flips in 1000");
    let always = HorizontalFlip::new(1.0)
        .apply(image.clone(), &mut rng(1))
        .unwrap();
    assert_eq!(always, image.clone().flipped());
    assert_eq!(
        HorizontalFlip::new(0.0)
            .apply(image.clone(), &mut rng(1))
            .unwrap(),
        image
    );
}

#[test]
fn a_random_resized_crop_gives_its_size_from_a_window_inside_the_image() {
    let t = RandomResizedCrop::new(6);
    for seed in 0..100 {
        let (top, left, h, w) = t.window(20, 30, &mut rng(seed));
        assert!(h > 0 && w > 0 && top + h <= 20 && left + w <= 30);
        let share = (h * w) as f64 / 600.0;
        let ratio = w as f64 / h as f64;
        assert!(
            (0.05..=1.0).contains(&share) && (0.6..=1.5).contains(&ratio),
            "{h}×{w}"
        );
    }
    let out = t.apply(ramp(30, 20), &mut rng(3)).unwrap();
    assert_eq!((out.width, out.height, out.channels), (6, 6, 3));
    // No draw can fit a window of ratio 10 or more in a square: the centre, ratio clamped.
    let wide = RandomResizedCrop::new(4).ratio(10.0, 12.0);
    assert_eq!(wide.window(10, 10, &mut rng(0)), (4, 0, 1, 10));
}

#[test]
fn normalize_works_per_channel_and_transforms_chain() {
    let chain = Identity
        .then(ToTensor)
        .then(Normalize::new([0.0, 0.5, 1.0], [1.0, 2.0, 0.5]));
    let data = chain.apply(ramp(1, 1), &mut rng(0)).unwrap();
    assert_eq!(
        data.to_vec::<f32>().unwrap(),
        [0.0, -0.25, (7.0 / 255.0 - 1.0) / 0.5]
    );
    let err = Normalize::new([0.0], [1.0]).apply(ramp(1, 1).to_tensor_data(), &mut rng(0));
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("1 means and 1 deviations for an array of 3 channels")
    );
    // A closure is a transform too.
    let double = |x: u32, _: &mut StdRng| Ok(x * 2);
    assert_eq!(double.then(double).apply(3, &mut rng(0)).unwrap(), 12);
}

#[test]
fn an_image_folder_lists_classes_in_order_and_names_a_file_that_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for class in ["dog", "cat", "empty"] {
        std::fs::create_dir(root.join(class)).unwrap();
    }
    ramp(4, 3).save(root.join("dog/b.png")).unwrap();
    ramp(2, 2).save(root.join("dog/a.png")).unwrap();
    std::fs::rename(root.join("dog/a.png"), root.join("dog/a.PNG")).unwrap();
    ramp(3, 3).save(root.join("cat/x.png")).unwrap();
    std::fs::write(root.join("cat/notes.txt"), "not an image").unwrap();
    std::fs::write(root.join("cat/y.jpg"), "not a jpeg either").unwrap();
    let folder = ImageFolder::open(root).unwrap();
    assert_eq!(folder.classes(), ["cat", "dog"]);
    assert_eq!(folder.len(), 4);
    let key = |index| ItemKey {
        seed: 0,
        epoch: 0,
        index,
    };
    let (image, class) = folder.get(key(2)).unwrap();
    assert_eq!((image.width, image.height, class), (2, 2, 1));
    assert_eq!(folder.get(key(3)).unwrap().0, ramp(4, 3));
    let err = format!("{:#}", folder.get(key(1)).unwrap_err());
    assert!(
        err.contains("decoding") && err.contains("cat/y.jpg"),
        "{err}"
    );
    let missing = ImageFolder::open(root.join("nowhere")).unwrap_err();
    assert!(format!("{missing:#}").contains("nowhere"), "{missing:#}");
    let empty = ImageFolder::open(root.join("empty")).unwrap_err();
    assert!(empty.to_string().contains("no images in"), "{empty}");
}
