#!/usr/bin/env python3
"""Fault injection (issue 17): 3 ranks of apps/train --sync ddp, started by torchrun's
variables, one killed with SIGKILL during the second epoch, over shared memory and over TCP.
The survivors must exit non-zero, both naming it; a restart from the checkpoint of the first epoch
must give the second epoch's losses of an uninterrupted run, bit for bit.

usage: fault_resume_test.py TRAIN"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from train_log import clean_env, free_port

train = sys.argv[1]
failures = []
STEPS = 150  # per epoch: long enough to kill a rank in the middle of the second


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def start(transport, metrics, extra):
    port = free_port()
    args = [train, "--sync", "ddp", "--epochs", "2", "--max-iters", str(STEPS), "--threads", "1",
            "--eval-every", "0", "--log-every", "1", "--transport", transport,
            "--comm-timeout", "120", "--metrics", metrics, *extra]
    return [subprocess.Popen(args, env=clean_env(RANK=r, WORLD_SIZE=3, MASTER_ADDR="127.0.0.1",
                                                 MASTER_PORT=port),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(3)]


def finish(procs):
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return [p.returncode for p in procs], outs


def epoch2_losses(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    return [j["loss"] for j in lines if j.get("type") == "iteration" and j.get("epoch") == 2]


with tempfile.TemporaryDirectory() as tmp:
    for transport in ("shm", "tcp"):
        ref = f"{tmp}/{transport}-ref.json"
        codes, outs = finish(start(transport, ref, []))
        check(codes == [0, 0, 0], f"{transport}: the uninterrupted run exits 0: {codes}")

        ckpt = f"{tmp}/{transport}.safetensors"
        procs = start(transport, f"{tmp}/{transport}-killed.json", ["--checkpoint", ckpt])
        deadline = time.monotonic() + 120
        while not os.path.exists(ckpt) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # into the second epoch
        procs[2].send_signal(signal.SIGKILL)
        codes, outs = finish(procs)
        check(codes[:2] == [1, 1] and codes[2] == -signal.SIGKILL,
              f"{transport}: killed mid-epoch: the survivors exit 1: {codes}")
        # Over shm a rank that gives up passes the dead rank on; over TCP a survivor that
        # hears of one that gave up asks its PeerWatch which process exited.
        for r in (0, 1):
            check(f"rank 2 (process {procs[2].pid}) has exited" in outs[r],
                  f"{transport}: rank {r} names rank 2: {outs[r].strip()[-250:]!r}")

        resumed = f"{tmp}/{transport}-resumed.json"
        codes, outs = finish(start(transport, resumed, ["--resume", ckpt]))
        check(codes == [0, 0, 0], f"{transport}: the restart from the checkpoint exits 0: {codes}")
        a, b = epoch2_losses(ref), epoch2_losses(resumed)
        check(len(a) == STEPS and a == b,
              f"{transport}: the second epoch's {len(b)} losses after the restart equal the "
              f"uninterrupted run's {len(a)}, bit for bit")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
