#!/usr/bin/python3
"""Writes an image folder for bench/data (DIR/train/<class>/*.jpg, DIR/val/...): JPEGs of the
sizes and weight of ImageNet's (mostly 500x375 and 375x500, some 500x333 and 640x480, about
110 KB at quality 90: broad shapes plus fine texture, so that decoding works as on photos).
With Debian's python3-pil and python3-numpy:
    /usr/bin/python3 bench/make_images.py DIR [--train 2000] [--val 200] [--classes 10]
"""
import argparse
import os

import numpy as np
from PIL import Image

SIZES = [(500, 375)] * 5 + [(375, 500)] * 2 + [(500, 333), (640, 480), (333, 500)]


def photo(w, h, rng):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        for _ in range(4):
            fx, fy, phase = rng.uniform(0.002, 0.05, 2).tolist() + [rng.uniform(0, 6.3)]
            img[..., c] += rng.uniform(20, 50) * np.sin(x * fx + y * fy + phase)
    for _ in range(6):  # blobs with edges
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(20, 150)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] += rng.uniform(-60, 60, 3)
    img += 128 + rng.normal(0, 18, (h, w, 3)).astype(np.float32)  # texture
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=2000)
    p.add_argument("--val", type=int, default=200)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    total = 0
    for split, n in [("train", a.train), ("val", a.val)]:
        for i in range(n):
            c = i % a.classes
            d = os.path.join(a.dir, split, f"class{c:03d}")
            os.makedirs(d, exist_ok=True)
            w, h = SIZES[rng.integers(len(SIZES))]
            path = os.path.join(d, f"{i:06d}.jpg")
            photo(w, h, rng).save(path, quality=90)
            total += os.path.getsize(path)
    n = a.train + a.val
    print(f"{a.dir}: {n} JPEGs, {total / n / 1024:.0f} KB on average")


if __name__ == "__main__":
    main()
