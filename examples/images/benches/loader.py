"""torchvision's side of `cargo xtask bench data`: one epoch of ImageFolder with the images
example's training transforms in a DataLoader. Usage: loader.py ROOT WORKERS. Prints a JSON
report as its last line."""

import json
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main() -> None:
    root, workers = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(2)
    augment = transforms.Compose([
        transforms.RandomCrop(32, padding=4),
        transforms.RandomHorizontalFlip(0.5),
        transforms.ToTensor(),
        transforms.Normalize([0.5] * 3, [0.25] * 3),
    ])
    folder = datasets.ImageFolder(f"{root}/train", transform=augment)
    loader = DataLoader(folder, batch_size=128, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
    start = time.perf_counter()
    samples = 0
    for images, _labels in loader:
        samples += images.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({"samples": samples, "seconds": seconds, "samples_per_s": samples / seconds}))


if __name__ == "__main__":
    main()
