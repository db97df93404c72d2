#!/usr/bin/env python3
"""bench/scaling on real files at CI speed (issue 28): the one-node split study of ResNet-18
(CIFAR's, 32x32) over tests/fixtures/images with --data imagefolder (1 decode thread per
rank) and over the shards ringflow-pack makes of it with --data shards (--workers 0: decoding
in the step). Checks that every split ran on those files (apps/train's own log lists the
fixture's classes), that the CSV and summary.md name the data source and how each rank's
cores were split, and that they carry the data wait beside the other phases; and that
--data without a folder is refused with a line saying what to give. No figure of time
decides anything here.

usage: scaling_images_test.py BENCH_SCALING TRAIN PACK SOURCE_ROOT
"""
import csv
import glob
import os
import subprocess
import sys
import tempfile

bench, train, pack, root = sys.argv[1:5]
IMAGES = os.path.join(root, "tests", "fixtures", "images")
CLASSES = "4 classes (Zebra, apple, cat 2, cat_1)"  # as apps/train logs the fixture's
failures = []


def check(ok, what, output=""):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
        print(output[-3000:], flush=True)


def study(out, *data):
    cmd = [bench, "--study", "split", "--models", "resnet18_cifar", "--cores", "2", "--batch", "4",
           "--iters", "3", "--train", train, "--timeout", "120", "--no-plots", "--out", out, *data]
    print(" ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def check_study(out, kind, folder, workers, log_line):
    """The split study's outputs for --data kind folder with --workers workers."""
    with open(os.path.join(out, "split.csv")) as f:
        rows = list(csv.DictReader(f))
    # A rank of C cores: max(1, C - workers) compute threads beside its decode threads.
    want = sorted([("1", "2", str(max(1, 2 - workers)), str(workers)),
                   ("2", "1", "1", str(workers))])
    got = sorted((r["ranks"], r["threads"], r["compute_threads"], r["workers"]) for r in rows)
    check(got == want, f"{kind}: splits 1x2 and 2x1 as (ranks, cores, compute, decode) {want}: {got}")
    check(all(r["data"] == kind for r in rows), f"{kind}: split.csv names the data ({kind})")
    for r in rows:
        data_ms, step_ms = float(r["data_ms"]), float(r["step_ms"])
        check(0 <= data_ms <= step_ms and abs(float(r["data_share"]) - data_ms / step_ms) < 1e-4,
              f"{kind} {r['ranks']}x{r['threads']}: data wait {data_ms} ms of the {step_ms} ms step")
        if workers == 0:  # the decode runs inside the step: its wait cannot be nothing
            check(data_ms > 0, f"{kind} {r['ranks']}x{r['threads']}, --workers 0: the decode in the "
                  f"data wait ({data_ms} ms)")
    logs = sorted(glob.glob(os.path.join(out, "runs", "*.log")))
    for log in logs:
        text = open(log).read()
        check(CLASSES in text and log_line in text, f"{kind}: {os.path.basename(log)} trained on the "
              f"fixture ('{CLASSES}', '{log_line}')", text)
    check(len(logs) == 2, f"{kind}: 2 runs logged ({len(logs)})")
    summary = open(os.path.join(out, "summary.md")).read()
    check(f"Data: {kind} `{folder}`" in summary, f"{kind}: summary.md names the data source", summary)
    check(f"--dataset {kind} --data-dir {folder} --workers W" in summary,
          f"{kind}: summary.md gives train's data flags", summary)
    check("ranks x cores (compute + decode threads)" in summary and
          f"2x1 (1 + {workers})" in summary, f"{kind}: summary.md shows how the cores were split", summary)
    check("| data wait | comm share |" in summary and "| data wait | forward |" in summary,
          f"{kind}: summary.md has the data wait in the split table and the phase breakdown", summary)


with tempfile.TemporaryDirectory(prefix="scaling_images_test.") as tmp:
    for args, want in [(["--data", "imagefolder"], "--data imagefolder needs one folder: "
                        "--data imagefolder DIR (DIR/train/<class>/<images>"),
                       (["--data", "shards", os.path.join(tmp, "none")],
                        f"--data shards {tmp}/none: no folder {tmp}/none/train"),
                       (["--data", "folder", IMAGES], "--data folder: expected synthetic, imagefolder DIR "
                        "or shards DIR")]:
        code, out = study(os.path.join(tmp, "refused"), *args)
        check(code == 2 and want in out, f"refused: {' '.join(args)}", out)

    out = os.path.join(tmp, "imagefolder")
    code, text = study(out, "--data", "imagefolder", IMAGES, "--workers", "1")
    check(code == 0, f"imagefolder: bench/scaling exits 0 (got {code})", text)
    if code == 0:
        check_study(out, "imagefolder", IMAGES, 1, "13 training and 4 test images")

    shards = os.path.join(tmp, "shards")
    p = subprocess.run([pack, "--data-dir", IMAGES, "--out", shards, "--max-count", "2"],
                       capture_output=True, text=True)
    check(p.returncode == 0, "ringflow-pack packs the fixture", p.stdout + p.stderr)
    out = os.path.join(tmp, "shards-study")
    code, text = study(out, "--data", "shards", shards, "--workers", "0")
    check(code == 0, f"shards: bench/scaling exits 0 (got {code})", text)
    if code == 0:
        check_study(out, "shards", shards, 0, "7 training shards")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
