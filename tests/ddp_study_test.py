#!/usr/bin/env python3
"""bench/ddp end to end at CI speed: the mlp, 3 iterations, 2 ranks, every study (overhead
on one node), under plain mpiexec and (where network namespaces can be made) on 2 emulated
hosts at 1 Gbit/s.
Checks that the CSV files and summary.md are written and parse, that every configuration
ran, and that the bytes the app counted match the closed forms (bytes are deterministic;
no figure of time decides anything here).

usage: ddp_study_test.py BENCH_DDP TRAIN
"""
import csv
import os
import subprocess
import sys
import tempfile


def main(bench, train):
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAIL:", what)

    with tempfile.TemporaryDirectory(prefix="ddp_study_test.") as out:
        cmd = [bench, "--quick", "--study", "strategies,buckets,scaling,overhead", "--models", "mlp", "--batch", "16", "--iters", "3",
               "--warmup", "1", "--ranks", "2", "--nets", "plain,1gbit", "--caps", "0,25",
               "--bucket-net", "plain", "--scaling-ranks", "1,2", "--train", train,
               "--timeout", "120", "--out", out]
        print(" ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        check(rc == 0, f"bench/ddp exited {rc}")
        if not os.path.exists(os.path.join(out, "summary.md")):
            print("FAIL: bench/ddp wrote no summary.md")
            return 1
        summary = open(os.path.join(out, "summary.md")).read()
        cluster_skipped = "Emulated-cluster runs skipped" in summary
        for part in ("## How the numbers were taken", "## How the strategies compare",
                     "## Strategies side by side", "## Bucket-size sweep", "## Scaling",
                     "mlp, mpiexec -n 2: ddp takes",
                     "the time of ddp without communication",
                     "mlp, mpiexec -n 2: ddp's iteration takes",
                     "allreduce-after-backward's", "## What DDP costs beside the wire",
                     "with the noop hook ddp's iteration is",
                     "ddp's communication used about", "computing cores"):
            check(part in summary, f"summary.md lacks '{part}'")

        def rows(name):
            with open(os.path.join(out, name)) as f:
                return list(csv.DictReader(f))

        strat = rows("strategies.csv")
        nets = ["plain"] + ([] if cluster_skipped else ["1gbit"])
        strategies = ("gather-scatter", "allreduce", "ddp", "ddp-noop")
        want = {("none", "plain")} | {(s, n) for s in strategies for n in nets}
        check({(r["strategy"], r["net"]) for r in strat} == want,
              f"strategies.csv holds {sorted((r['strategy'], r['net']) for r in strat)}")
        for r in strat:
            what = f"{r['strategy']} {r['net']}"
            check(float(r["step_ms"]) > 0 and int(r["iterations"]) == 2, f"{what}: figures")
            check(int(r["parameters"]) > 0, f"{what}: parameter count")
            theory, counted = float(r["theory_bytes"]), float(r["counted_bytes"])
            if r["strategy"] in ("gather-scatter", "allreduce", "ddp"):
                check(theory > 0 and abs(counted / theory - 1) <= 0.05,
                      f"{what}: {counted} bytes against the theory's {theory}")
            if r["strategy"] == "ddp-noop":
                check(float(r["bytes_sent"]) == 0, f"{what}: the noop hook sent bytes")
        buckets = rows("buckets.csv")
        check(sorted(float(r["bucket_cap_mb"]) for r in buckets) == [0, 25], "buckets.csv caps")
        scaling = rows("scaling.csv")
        check(sorted((r["scaling"], int(r["ranks"])) for r in scaling) ==
              [("strong", 1), ("strong", 2), ("weak", 1), ("weak", 2)], "scaling.csv rows")
        for r in scaling:
            check(float(r["images_per_s"]) > 0 and float(r["efficiency"]) > 0, "scaling figures")
        overhead = rows("overhead.csv")
        check(sorted((r["strategy"], r["bucket_cap_mb"]) for r in overhead) ==
              [("allreduce", ""), ("allreduce-noop", ""), ("ddp", "0"), ("ddp", "25"),
               ("ddp-noop", "25"), ("none", "")], "overhead.csv rows")
        for r in overhead:
            what = f"overhead {r['strategy']} {r['bucket_cap_mb']}"
            noop = r["strategy"] in ("none", "allreduce-noop", "ddp-noop")
            check((float(r["bytes_sent"]) == 0) == noop, f"{what}: bytes sent {r['bytes_sent']}")
            check(float(r["softirq_ms"]) >= 0, f"{what}: node softirq {r['softirq_ms']}")
            if not noop:  # the communication thread's CPU clock was read
                check(float(r["comm_cpu_ms"]) > 0, f"{what}: comm thread cpu {r['comm_cpu_ms']}")
                check(r["compute_slowdown"] != "" and r["x_allreduce"] != "", f"{what}: ratios")
        if "Plots: not drawn" not in summary:
            for png in ("strategies-mlp.png", "buckets.png", "scaling.png"):
                check(os.path.getsize(os.path.join(out, png)) > 0, f"{png} missing")
    print(f"{len(failures)} failures" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
