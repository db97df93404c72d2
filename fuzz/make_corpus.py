#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): small well-formed
files of each format, so that libFuzzer starts from inputs that get past the first checks.
Standard library only (the image seeds are copied from tests/fixtures/images); run by hand (the seeds are committed):
    python3 fuzz/make_corpus.py"""
import gzip
import io
import json
import os
import struct
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


write("safetensors", "two_tensors", safetensors({
    "w": ("F32", [2, 3], struct.pack("<6f", *range(6))),
    "b": ("I64", [2], struct.pack("<2q", 1, -1))}, {"epoch": "1"}))
write("safetensors", "half_and_empty", safetensors({
    "h": ("F16", [4], b"\x00\x3c" * 4), "e": ("BF16", [0], b"")}))
write("safetensors", "scalar_f64", safetensors({"s": ("F64", [], struct.pack("<d", 2.5))}))

images = struct.pack(">I", 0x00000803) + struct.pack(">3I", 2, 3, 3) + bytes(range(18))
labels = struct.pack(">I", 0x00000801) + struct.pack(">I", 2) + bytes([3, 7])
write("idx", "images", images)
write("idx", "labels", labels)
write("idx", "images.gz", gzip.compress(images, mtime=0))

record = bytes([5]) + bytes(i % 256 for i in range(3072))
write("cifar10", "two_records", record + bytes([9]) + record[1:])
write("cifar10", "one_record", record)
# Images: small files of tests/fixtures/images (every decoder path: baseline, greyscale, CMYK
# and progressive JPEG; RGBA, palette and interlaced PNG).
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "images", "train")
for rel in ["Zebra/z1.jpg", "Zebra/z2.JPEG", "apple/sub/c.jpg", "apple/sub dir/d.jpg", "apple/a 1.png",
            "apple/sub/b.png", "cat 2/h.png"]:
    with open(os.path.join(FIXTURES, rel), "rb") as f:
        write("image", os.path.basename(rel).replace(" ", "_"), f.read())

# A WebDataset shard: two samples, a long (pax) name.
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for name, data in [("a.jpg", b"\xff\xd8\xff"), ("a.cls", b"1"), ("d" * 120 + "/b.png", b"\x89PNG"),
                       ("d" * 120 + "/b.cls", b"0\n")]:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
write("tar", "two_samples", buf.getvalue())
print("wrote", os.path.join(HERE, "corpus"))
