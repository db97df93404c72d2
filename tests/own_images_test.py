#!/usr/bin/env python3
"""train on one's own images, as a user runs it (issue 28): --dataset imagefolder on a copy of
tests/fixtures/images (JPEGs and PNGs of every mode, classes whose names test the sort
order), the classes in the log and in the checkpoint's metadata; a truncated JPEG named in
one line and a non-zero exit, or skipped and counted with --skip-bad-images; flags that
cannot work named; ringflow-pack's shards trained on with --dataset shards, alone and under
mpiexec -n 2 (each rank its own shards); an image above --max-image-pixels (train and
ringflow-pack) and fewer shards than ranks named by the programs' flags.

usage: own_images_test.py TRAIN PACK MPIEXEC SOURCE_ROOT"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

train, pack, mpiexec, root = sys.argv[1:5]
IMAGES = os.path.join(root, "tests", "fixtures", "images")
QUICK = {"--model": "resnet18_cifar", "--epochs": "1", "--batch-size": "4", "--workers": "2",
         "--threads": "1", "--log-every": "1"}
failures = []


def quick(*flags, **options):
    """train's arguments for a short run: QUICK with options (--batch-size 13 as batch_size="13")."""
    merged = dict(QUICK, **{"--" + k.replace("_", "-"): v for k, v in options.items()})
    return [a for kv in merged.items() for a in kv] + list(flags)


def check(ok, what, output=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        print(output[-3000:])


def run(args, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
    return p.returncode, p.stdout, p.stderr


def metadata(path):
    """The string metadata of a safetensors file (the checkpoint's "info." entries)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "images")
    shutil.copytree(IMAGES, data)
    ckpt = os.path.join(tmp, "ckpt.safetensors")
    code, out, err = run([train, *quick(dataset="imagefolder", data_dir=data, checkpoint=ckpt)])
    check(code == 0, "imagefolder: trains and evaluates", out + err)
    check("4 classes (Zebra, apple, cat 2, cat_1); 32 x 32 images" in out, "the classes in the log", out)
    check("13 training and 4 test images" in out, "13 training and 4 validation images", out)
    check(f"{data}/train: 2 file(s) ignored (not .jpg, .jpeg or .png)" in out, "other files counted", out)
    check("Test set: Average loss:" in out, "the validation set evaluated", out)
    info = metadata(ckpt) if os.path.exists(ckpt) else {}
    check(json.loads(info.get("info.classes", "[]")) == ["Zebra", "apple", "cat 2", "cat_1"],
          "the classes in the checkpoint's metadata", str(info))

    # A truncated JPEG: one line naming it, a non-zero exit; or skipped and counted.
    bad = os.path.join(data, "train", "cat_1", "big.jpg")
    with open(bad, "rb") as f:
        head = f.read()[:3000]
    with open(bad, "wb") as f:
        f.write(head)
    code, out, err = run([train, *quick(dataset="imagefolder", data_dir=data, batch_size="13")])
    want = (f"train: {bad}: truncated JPEG: the file ends before its end-of-image marker (libjpeg-turbo: "
            "Premature end of JPEG file)\n")
    check(code != 0 and err == want, "a truncated JPEG: one line naming it", out + err)
    code, out, err = run([train, *quick("--skip-bad-images", dataset="imagefolder", data_dir=data, batch_size="6",
                                      eval_every="0")])
    check(code == 0 and f"train: skipped a bad image: {bad}: truncated JPEG" in err
          and "bad images skipped in epoch 1 (--skip-bad-images)" in err,
          "--skip-bad-images: named and counted", out + err)
    shutil.copy(os.path.join(IMAGES, "train", "cat_1", "big.jpg"), bad)

    # Flags that cannot work, each named.
    for options, want in [
        ({}, "--dataset imagefolder needs --data-dir DIR"),
        ({"data_dir": os.path.join(tmp, "none")}, "/none: no such folder"),
        ({"data_dir": data, "model": "small_cnn"}, "--model small_cnn takes images of shape (1, 28, 28)"),
        ({"data_dir": data, "model": "inception_v3", "image_size": "32"},
         "--image-size 32: --model inception_v3 does not take (3, 32, 32) images (conv2d: "),
        ({"data_dir": data, "train_transform": "fancy"}, "--train-transform: fancy not in {imagenet,cifar}"),
    ]:
        code, out, err = run([train, *quick(dataset="imagefolder", **options)])
        check(code != 0 and want in err, "refused: " + str(options), out + err)
    code, out, err = run([train, *quick(dataset="imagefolder", data_dir=data, image_size="40",
                                        train_transform="cifar", max_iters="1")])
    check(code == 0 and "40 x 40 images, transforms cifar (train) and cifar (val)" in out,
          "--image-size other than the model's, when it takes it", out + err)

    # Shards: packed, trained on alone and by two ranks.
    shards = os.path.join(tmp, "shards")
    code, out, err = run([pack, "--data-dir", data, "--out", shards, "--max-count", "2"])
    check(code == 0 and f"{shards}/train: 13 images of 4 classes in 7 shards; 2 other files ignored" in out,
          "ringflow-pack", out + err)
    code, out, err = run([train, *quick(dataset="shards", data_dir=shards)])
    check(code == 0 and "7 training shards (13 images, 13 per rank and epoch)" in out
          and "Test set: Average loss:" in out, "shards: trains and evaluates", out + err)
    code, out, err = run([mpiexec, "-n", "2", train, *quick(dataset="shards", data_dir=shards, sync="ddp",
                                                            batch_size="3")])
    check(code == 0 and "(13 images, 6 per rank and epoch)" in out and "Iteration [2/2]" in out,
          "shards under mpiexec -n 2: 6 images per rank, 2 steps of 3", out + err)
    # The library's errors in the programs' terms: their flags, not its options' fields.
    above = re.compile(r"(train|ringflow-pack): \S+: \d+x\d+ = \d+ pixels is above the limit of 400 "
                       r"\(a decompression bomb\?\); raise --max-image-pixels if the image is real\n")
    code, out, err = run([train, *quick(dataset="imagefolder", data_dir=data, max_image_pixels="400")])
    check(code != 0 and above.fullmatch(err) and err.startswith("train: "),
          "train: an image above --max-image-pixels names the flag", out + err)
    code, out, err = run([pack, "--data-dir", data, "--out", os.path.join(tmp, "big"), "--max-image-pixels", "400"])
    check(code != 0 and above.fullmatch(err) and err.startswith("ringflow-pack: "),
          "ringflow-pack: an image above --max-image-pixels names the flag", out + err)
    one = os.path.join(tmp, "one")
    code, out, err = run([pack, "--data-dir", data, "--out", one, "--max-count", "20"])
    check(code == 0 and f"{one}/train: 13 images of 4 classes in 1 shards" in out, "ringflow-pack: one shard", out + err)
    code, out, err = run([mpiexec, "-n", "2", train, *quick(dataset="shards", data_dir=one, sync="ddp")])
    want = (f"train: {one}/train: 1 shards for 2 ranks: each rank reads shards of its own; write the images into "
            "more shards (a smaller --max-count of ringflow-pack)")
    check(code != 0 and want in err and "ShardWriterOptions" not in err,
          "shards under mpiexec -n 2: one shard for two ranks names ringflow-pack's flag", out + err)

    code, out, err = run([pack, "--data-dir", os.path.join(tmp, "none"), "--out", shards])
    check(code != 0 and "ringflow-pack: " + os.path.join(tmp, "none") + "/train: no such folder" in err,
          "ringflow-pack: a missing folder named", out + err)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
