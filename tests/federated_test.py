#!/usr/bin/env python3
"""apps/train --sync fedavg end to end (issue 14): one user is one process (every loss equal
to --sync none's, bit for bit); two users averaging after every step of plain SGD end with
the parameters of --sync allreduce to 1e-6 after 5 steps (both checkpoints read here); the bytes each rank
counted per epoch are the closed form's within 1%, cloud and allreduce, fp32 and bf16 (half
the bytes); non-IID users (--partition dirichlet:0.3) train by --local-epochs; and flags
that apply to fedavg alone are refused elsewhere, naming the flag.

Then bench/federated (the study behind `./dev study federated`) at CI speed: 2 users, a few
iterations per epoch, fp32 and bf16; its CSV and summary are written, and the summary
reports FL in bf16 moving half of fp32's bytes and the transport's counts within 1% of the
closed form. No figure of time or accuracy decides anything.

usage: federated_test.py TRAIN MPIEXEC BENCH_FEDERATED"""
import csv
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

train, mpiexec, study = sys.argv[1], sys.argv[2], sys.argv[3]
# Short runs unless a test says otherwise.
DEFAULTS = {"--epochs": "1", "--max-iters": "6", "--threads": "1", "--workers": "0",
            "--log-every": "1", "--eval-every": "0"}
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, ranks=None):
    defaults = [x for k, v in DEFAULTS.items() if k not in args for x in (k, v)]
    cmd = ([mpiexec, "-n", str(ranks)] if ranks else []) + [train, *defaults, *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    return p.returncode, p.stdout


def lines(path, kind):
    with open(path) as f:
        return [j for j in map(json.loads, f) if j["type"] == kind]


def tensors(path):
    """A safetensors file's F32 tensors as lists of floats, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        # Parameters only: batch norm's running statistics are averaged by fedavg but are
        # rank 0's own under allreduce.
        if name == "__metadata__" or t["dtype"] != "F32" or not name.startswith("model.") \
                or ".running_" in name:
            continue
        a, b = t["data_offsets"]
        out[name] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out


with tempfile.TemporaryDirectory() as tmp:
    # One user is one process.
    code_a, out_a = run(["--sync", "none", "--metrics", f"{tmp}/none.json"])
    code_b, out_b = run(["--sync", "fedavg", "--local-steps", "2", "--metrics", f"{tmp}/fed1.json"], 1)
    a = [j["loss"] for j in lines(f"{tmp}/none.json", "iteration")]
    b = [j["loss"] for j in lines(f"{tmp}/fed1.json", "iteration")]
    check(code_a == 0 and code_b == 0 and len(a) == 6 and a == b,
          f"one user: fedavg losses {b} == one process's {a}")

    # Two users, a round after every plain SGD step: the parameters of allreduce. After one
    # step the two differ by one rounding (averaging models instead of gradients), checked per
    # tensor. Later steps amplify it where a gradient is a sum that mostly cancels (batch
    # norm's biases: ~1e-3 of their own tiny size after two steps), so five steps are checked
    # against the model's scale (its largest parameter). A small learning rate keeps the
    # amplification down: at the default one the small CNN's first steps amplify float
    # rounding about a thousandfold within 5 steps, in both runs alike.
    plain = ["--momentum", "0", "--schedule", "none", "--lr", "0.002"]
    for steps, scale, tolerance in ((1, "tensor", 1e-6), (5, "model", 1e-5)):
        limit = ["--max-iters", str(steps)]
        code_a, out_a = run(["--sync", "allreduce", *plain, *limit, "--checkpoint", f"{tmp}/ar.st"], 2)
        code_b, out_b = run(["--sync", "fedavg", "--local-steps", "1", *plain, *limit,
                             "--checkpoint", f"{tmp}/fed.st"], 2)
        check(code_a == 0 and code_b == 0, f"allreduce and fedavg runs exit 0 ({code_a}, {code_b})")
        if code_a != 0 or code_b != 0:
            print(out_a[-1500:], out_b[-1500:], sep="\n")
            continue
        ta, tb = tensors(f"{tmp}/ar.st"), tensors(f"{tmp}/fed.st")
        model_max = max(max(map(abs, v)) for v in ta.values())
        # The largest difference over the largest magnitude of the tensor (tests/testing.h's
        # max_rel_diff) or of the whole model.
        worst = max(max(abs(x - y) for x, y in zip(ta[k], tb[k])) /
                    (max(map(abs, ta[k])) if scale == "tensor" else model_max) for k in ta)
        check(set(ta) == set(tb) and len(ta) > 0 and worst <= tolerance,
              f"fedavg --local-steps 1 vs allreduce, {steps} step(s): largest difference "
              f"{worst:.2e} of the {scale}'s largest magnitude (at most {tolerance:g})")

    # Bytes per epoch: counted by the transport vs the closed form, and 16 bits halving them.
    sent = {}
    for topo in ("cloud", "allreduce"):
        for prec in ("fp32", "bf16"):
            m = f"{tmp}/{topo}-{prec}.json"
            code, out = run(["--sync", "fedavg", "--local-steps", "2", "--fed-topology", topo,
                             "--comm-precision", prec, "--algo", "ring", "--metrics", m], 3)
            e = lines(m, "epoch")[-1] if code == 0 else {}
            counted, closed = e.get("epoch_bytes_sent", 0), e.get("epoch_bytes_sent_closed_form", -1)
            check(code == 0 and e.get("rounds") == 3 and abs(counted - closed) <= 0.01 * closed,
                  f"{topo} {prec}: {e.get('rounds')} rounds, {counted:.0f} bytes sent per rank vs "
                  f"closed form {closed:.0f}")
            sent[topo, prec] = counted
            if code != 0:
                print(out[-1500:])
    for topo in ("cloud", "allreduce"):
        ratio = sent[topo, "bf16"] / max(1, sent[topo, "fp32"])
        check(0.49 <= ratio <= 0.51, f"{topo}: bf16 moves {ratio:.3f} of fp32's bytes")

    # Non-IID users, a round per local epoch over their unequal shares.
    code, out = run(["--sync", "fedavg", "--partition", "dirichlet:0.3", "--max-iters", "0",
                     "--batch-size", "64", "--eval-every", "1"], 3)
    # The epoch table's row of model averages: one, on every rank.
    averages = re.search(r"^ +model averages +1 +1$", out, re.M)
    check(code == 0 and "data split dirichlet:0.3" in out and averages is not None
          and "Test set" in out, "dirichlet:0.3 users, --local-epochs: trains and evaluates")
    if code != 0:
        print(out[-1500:])

    # Flags of fedavg elsewhere, and bad values: one line naming the flag, exit non-zero.
    for args, words in [(["--sync", "ddp", "--local-steps", "2"], "--local-steps applies to --sync fedavg"),
                        (["--comm-precision", "bf16"], "--comm-precision applies to --sync fedavg"),
                        (["--sync", "fedavg", "--local-steps", "2", "--local-epochs", "1"],
                         "exclude each other"),
                        (["--partition", "dirichlet:0"], "dirichlet:ALPHA")]:
        code, out = run(args)
        check(code != 0 and words in out, f"{' '.join(args)}: exit {code}, says '{words}'")
        if words not in out:
            print(out[-800:])

    # The study driver end to end.
    out = f"{tmp}/study"
    p = subprocess.run([study, "--quick", "--max-iters", "3", "--users", "2", "--batches", "256",
                        "--no-plots", "--train", train, "--mpiexec", mpiexec, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    check(p.returncode == 0, f"bench/federated --quick: exit {p.returncode}")
    if p.returncode != 0:
        print(p.stdout[-3000:])
    else:
        with open(f"{out}/federated.csv") as f:
            rows = list(csv.DictReader(f))
        runs = {(r["scheme"], r["precision"]) for r in rows}
        want = {(s, q) for s in ("C-SGD", "D-SGD b256", "FL") for q in ("fp32", "bf16")}
        check(runs == want, f"bench/federated: one run per scheme and precision {sorted(runs)}")
        with open(f"{out}/summary.md") as f:
            text = f.read()
        check("small_cnn: FL in bf16 moves 0.500 of fp32's bytes." in text,
              "bench/federated: summary says FL in bf16 moves half of fp32's bytes")
        m = re.search(r"differ from the closed form by at most ([0-9.]+)%", text)
        check(m is not None and float(m.group(1)) <= 1.0,
              "bench/federated: summary's counted bytes within 1% of the closed form "
              f"({m.group(0) if m else 'no such line'})")
        check("Runs that failed" not in text, "bench/federated: summary lists no failed run")

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
