#!/usr/bin/env python3
"""ringflow-report (apps/run_report.h) on real runs: 2 ranks of --sync ddp under mpiexec and
one process, the latter given the same metrics path twice (two runs in one file). The
report must hold report.md and every plot it links, each a PNG (signature, a header of
plot size, more bytes than empty axes: about 9 KB at these sizes); the plots' data must be
the figures that train wrote (bytes per epoch and their closed form, each iteration's
phases and communication, the last epoch's losses in report.md); bad input must end in a message naming it
and exit 1.
Skipped (77) where gnuplot is not installed (./dev test installs gnuplot-nox).

usage: run_report_test.py TRAIN RINGFLOW_REPORT MPIEXEC"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

train, report, mpiexec = sys.argv[1:4]
failures = []
PNG = b"\x89PNG\r\n\x1a\n"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, **kw):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_", "SLURM_", "HYDRA_"))}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, **kw)


def records(path, kind):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("type") == kind]


def numbers(path):
    with open(path) as f:
        return [[float(x) for x in line.split()] for line in f if line.strip()]


if not shutil.which("gnuplot"):
    print("SKIP: gnuplot is not installed (Debian: gnuplot-nox)")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    ddp, single, out = f"{tmp}/ddp.jsonl", f"{tmp}/single.jsonl", f"{tmp}/report"
    common = ["--model", "mlp", "--dataset", "synthetic", "--max-iters", "4", "--log-every", "1",
              "--threads", "1"]
    r = run([mpiexec, "-n", "2", train, "--sync", "ddp", "--epochs", "2", *common, "--metrics", ddp])
    check(r.returncode == 0, f"2 ranks of ddp train: {r.stderr[-500:]}")
    for _ in range(2):  # two runs appended to one file
        r = run([train, *common, "--epochs", "1", "--eval-every", "0", "--metrics", single])
        check(r.returncode == 0, f"one process trains: {r.stderr[-300:]}")

    r = run([report, ddp, single, "--out", out])
    check(r.returncode == 0 and "report.md" in r.stdout, f"ringflow-report exits 0: {r.stdout}{r.stderr}")
    if failures:
        sys.exit(1)
    with open(f"{out}/report.md") as f:
        md = f.read()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    expected = ["loss_accuracy.png", "throughput.png", "phases.png", "communication.png",
                "bytes.png", "runs.png"]
    check(links == expected, f"report.md links every plot: {links}")
    for png in links:
        with open(f"{out}/{png}", "rb") as f:
            data = f.read()
        width, height = struct.unpack(">II", data[16:24]) if len(data) >= 24 else (0, 0)
        check(data.startswith(PNG) and data[12:16] == b"IHDR" and width >= 800 and height >= 400
              and len(data) > 11000, f"{png}: a PNG of {width}x{height}, {len(data)} bytes")
    check("| single#2 |" in md and "| ddp |" in md and "| single |" in md,
          "the runs of both files, the second of the shared file as single#2")

    # The plots' data are train's figures.
    epochs = records(ddp, "epoch")
    its = records(ddp, "iteration")
    rows = numbers(f"{out}/plot-data/bytes-0.dat")
    want = [[e["epoch"], e["epoch_bytes_sent"] / 1e6, e["epoch_bytes_sent_closed_form"] / 1e6,
             e["epoch_bytes_received"] / 1e6, e["epoch_bytes_received_closed_form"] / 1e6]
            for e in epochs]
    check(len(rows) == 2 and all(abs(a - b) <= 1e-8 * max(1, abs(b))
                                 for r, w in zip(rows, want) for a, b in zip(r, w)),
          f"bytes per epoch: the metrics' counts and closed forms: {rows} vs {want}")
    check(all(r[1] == r[2] and r[1] > 0 for r in rows), "ddp's counted bytes equal the closed form")
    phases = ["data_ms", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms", "step_ms"]
    rows = numbers(f"{out}/plot-data/phases-0.dat")
    want = [[i["global_iteration"]] + [i[p] for p in phases] for i in its]
    check(len(rows) == 8 and all(abs(a - b) <= 1e-8 * max(1, abs(b))
                                 for r, w in zip(rows, want) for a, b in zip(r, w)),
          f"phases: each logged iteration's, as the metrics hold them ({len(rows)} rows)")
    rows = numbers(f"{out}/plot-data/communication-0.dat")
    want = [[i["global_iteration"], i["comm_ms"], i["comm_total_ms"], 100 * i["overlap"], i["comm_cpu_ms"]]
            for i in its]
    check(len(rows) == 8 and all(abs(a - b) <= 1e-8 * max(1, abs(b))
                                 for r, w in zip(rows, want) for a, b in zip(r, w)),
          f"communication: exposed, total, overlap and the comm thread's CPU time of each logged "
          f"iteration ({len(rows)} rows)")
    last = epochs[-1]
    check(f"| ddp | {last['train_loss']:.4f} | {100 * last['train_accuracy']:.1f}% | "
          f"{last['test_loss']:.4f} |" in md, "report.md: the last epoch's losses and accuracy")

    # Bad input: named, exit 1.
    bad = f"{tmp}/bad.jsonl"
    with open(bad, "w") as f:
        f.write('{"type": "header"}\nnot json\n')
    r = run([report, bad, "--out", f"{tmp}/bad"])
    check(r.returncode == 1 and f"{bad}:2: not a JSON object" in r.stderr, f"a bad line: {r.stderr}")
    empty = f"{tmp}/empty.jsonl"
    open(empty, "w").close()
    r = run([report, empty, "--out", f"{tmp}/bad"])
    check(r.returncode == 1 and "no iteration or epoch records" in r.stderr, f"no records: {r.stderr}")
    r = run([report, ddp, "--out", f"{tmp}/bad", "--gnuplot", f"{tmp}/no-gnuplot"])
    check(r.returncode == 1 and "cannot run" in r.stderr and "gnuplot-nox" in r.stderr,
          f"no gnuplot: {r.stderr}")
    r = run([report, f"{tmp}/missing.jsonl", "--out", f"{tmp}/bad"])
    check(r.returncode != 0 and "missing.jsonl" in r.stderr, f"a missing file: {r.stderr}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
