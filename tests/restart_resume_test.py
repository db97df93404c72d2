#!/usr/bin/env python3
"""Restarts that resume (issue 33): apps/train under a restart loop, the whole job started
again with the same command when any rank fails (what torchrun --max-restarts or a Slurm
requeue does), with --checkpoint-dir, --checkpoint-every and --resume auto. A rank is killed
(SIGKILL) in the middle of the second epoch just after a checkpoint; the restarted job must
resume there, and its metrics file must hold every iteration once, with the per-iteration
losses and the epochs' records of an uninterrupted run, bit for bit. Three and two ranks of
--sync ddp started by torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the
same port on every restart, as torchrun's), and one process alone (whose metrics lines
written after the checkpoint are dropped on resume). At 3 ranks the ring adds each element's
gradients in an order that depends on where its bucket begins, so the restarted job must
reduce in the buckets the uninterrupted one had rebuilt (issue 32): the mlp in 0.3 MiB
buckets, which the rebuild moves (a restart that reduced its first step in the buckets DDP
starts with failed here).

usage: restart_resume_test.py TRAIN"""
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
STEPS, EVERY, KEEP = 40, 15, 2  # checkpoints at iterations 15, 30, 40 (epoch 1), 45, 60, 75, 80
KILL_AFTER = 45                 # epoch 2, after its iteration 5 of 40
MAX_RESTARTS = 3
MODEL = {3: ["--model", "mlp", "--bucket-cap-mb", "0.3"]}  # per world size; the default else


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def start(world, port, args):
    common = ["--epochs", "2", "--max-iters", str(STEPS), "--threads", "1", "--eval-every", "0",
              "--log-every", "1", *MODEL.get(world, []), *args]
    if world == 1:
        return [subprocess.Popen([train, *common], env=clean_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)]
    return [subprocess.Popen([train, "--sync", "ddp", *common],
                             env=clean_env(RANK=r, WORLD_SIZE=world, LOCAL_RANK=r,
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(world)]


def wait_job(procs):
    """As torchrun's agent: once one worker fails, the others are stopped (SIGTERM)."""
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.kill()
    return [p.returncode for p in procs], [p.communicate()[0] for p in procs]


def restart_loop(world, args, kill_when=None):
    """Runs the job until it succeeds, at most MAX_RESTARTS restarts; in the first attempt,
    kill_when() is polled and the last rank killed once it holds. Returns each attempt's
    (exit codes, outputs)."""
    port = free_port()
    attempts = []
    for attempt in range(MAX_RESTARTS + 1):
        procs = start(world, port, args)
        if attempt == 0 and kill_when:
            while not kill_when() and procs[-1].poll() is None:
                time.sleep(0.005)
            procs[-1].send_signal(signal.SIGKILL)
        codes, outs = wait_job(procs)
        attempts.append((codes, outs))
        if codes == [0] * world:
            break
    return attempts


def records(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    its = [(j["global_iteration"], j["loss"]) for j in lines if j.get("type") == "iteration"]
    epochs = [(j["epoch"], j["train_loss"], j["train_accuracy"]) for j in lines
              if j.get("type") == "epoch"]
    return its, epochs


with tempfile.TemporaryDirectory() as tmp:
    for world in (3, 2, 1):
        name = f"{world} rank{'s' if world > 1 else ''}"
        ref = f"{tmp}/ref{world}.json"
        ((codes, outs),) = restart_loop(world, ["--metrics", ref])
        check(codes == [0] * world, f"{name}: the uninterrupted run exits 0: {codes}")

        ckdir, metrics = f"{tmp}/ck{world}", f"{tmp}/resumed{world}.json"
        target = f"{ckdir}/checkpoint-{KILL_AFTER:09d}.safetensors"
        attempts = restart_loop(world, ["--metrics", metrics, "--checkpoint-dir", ckdir,
                                        "--checkpoint-every", str(EVERY), "--checkpoint-keep",
                                        str(KEEP), "--resume", "auto"],
                                kill_when=lambda: os.path.exists(target))
        first, last = attempts[0], attempts[-1]
        check(len(attempts) == 2 and first[0][-1] == -signal.SIGKILL and last[0] == [0] * world,
              f"{name}: killed once, then one restart that exits 0: {[a[0] for a in attempts]}")
        check("--resume auto: no checkpoint in" in first[1][0] and "starting afresh" in first[1][0],
              f"{name}: the first start says it starts afresh")
        resumed_line = [l for l in last[1][0].splitlines() if l.startswith("Resumed from")]
        check(len(resumed_line) == 1 and "in epoch 2 after its iteration" in resumed_line[0],
              f"{name}: the restart resumes inside epoch 2: {resumed_line}")
        (ref_its, ref_epochs), (its, epochs) = records(ref), records(metrics)
        check(len(ref_its) == 2 * STEPS and [g for g, _ in its] == list(range(1, 2 * STEPS + 1)),
              f"{name}: every iteration in the metrics once: {[g for g, _ in its][:3]}... "
              f"({len(its)} records)")
        check(its == ref_its, f"{name}: the per-iteration losses equal the uninterrupted run's, "
                              "bit for bit")
        check(len(ref_epochs) == 2 and epochs == ref_epochs,
              f"{name}: the epochs' train loss and accuracy too: {epochs} vs {ref_epochs}")
        kept = sorted(os.listdir(ckdir))
        check(kept == [f"checkpoint-{i:09d}.safetensors" for i in (75, 80)],
              f"{name}: the newest {KEEP} checkpoints kept: {kept}")
        if failures:
            for codes, outs in attempts:
                print(codes, *[o[-1500:] for o in outs], sep="\n")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
