#!/usr/bin/python3
"""torchvision's side of bench/data: ImageFolder + DataLoader over DIR/train with the
transforms of torchvision's ImageNet training recipe (RandomResizedCrop(size),
RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)), --workers worker processes,
prefetch_factor 2, shuffled, batches of --batch-size; images/s over --batches batches after
--warmup, once per --repeats (a fresh DataLoader each). Prints one JSON line:
{"images_per_s": [...], "torch": version, "torchvision": version}.

--check FILE: instead, writes the val recipe's output before Normalize (Resize(size * 256 / 224),
CenterCrop(size), as bytes (C, H, W) per image, uint8) for the first --check-count images of
ImageFolder's order, for bench/data to compare with its own.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--check")
    p.add_argument("--check-count", type=int, default=4)
    a = p.parse_args()
    train_dir = os.path.join(a.data_dir, "train")
    if a.check:
        t = transforms.Compose([transforms.Resize(a.image_size * 256 // 224), transforms.CenterCrop(a.image_size)])
        folder = datasets.ImageFolder(train_dir, t)
        with open(a.check, "wb") as f:
            for i in range(a.check_count):
                f.write(np.ascontiguousarray(np.asarray(folder[i][0]).transpose(2, 0, 1)).tobytes())
        return
    t = transforms.Compose([transforms.RandomResizedCrop(a.image_size), transforms.RandomHorizontalFlip(),
                            transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    folder = datasets.ImageFolder(train_dir, t)
    rates = []
    for r in range(a.repeats):
        torch.manual_seed(r)
        loader = DataLoader(folder, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                            drop_last=True)
        it = iter(loader)
        for _ in range(a.warmup):
            next(it)
        start = time.perf_counter()
        for _ in range(a.batches):
            next(it)
        rates.append(a.batches * a.batch_size / (time.perf_counter() - start))
        del it, loader
    print(json.dumps({"images_per_s": rates, "torch": torch.__version__, "torchvision": torchvision.__version__}))


if __name__ == "__main__":
    main()
