"""torchvision's ImageNet training loader over an image folder, timed the way
benches/stream.rs times tricklab's: ImageFolder + RandomResizedCrop(size) +
RandomHorizontalFlip + ToTensor (float32 in [0, 1]) or PILToTensor (uint8, what
tricklab's loader ends in: `--to-tensor uint8`, the like-for-like peer) through a
DataLoader with WORKERS worker processes, one warm-up epoch, then the best of
EPOCHS timed epochs. Prints one JSON line: images, seconds, images_per_s.

usage: python3 scripts/bench/torchvision_loader.py DIR [--workers N] [--batch B] [--size S] [--epochs E] [--to-tensor float|uint8]
"""
import argparse
import json
import time

import torch
from torchvision import datasets, transforms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--to-tensor", choices=["float", "uint8"], default="float")
    a = p.parse_args()
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor() if a.to_tensor == "float" else transforms.PILToTensor(),
    ])
    ds = datasets.ImageFolder(f"{a.dir}/train", transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                     drop_last=True, persistent_workers=a.workers > 0)
    best = float("inf")
    images = 0
    for epoch in range(a.epochs + 1):
        t = time.perf_counter()
        n = 0
        for x, y in dl:
            n += x.shape[0]
        s = time.perf_counter() - t
        if epoch > 0:  # the first epoch starts the workers and fills the page cache
            best = min(best, s)
            images = n
    print(json.dumps({"images": images, "seconds": best, "images_per_s": images / best,
                      "workers": a.workers, "to_tensor": a.to_tensor, "torchvision": __import__("torchvision").__version__}))


if __name__ == "__main__":
    main()
