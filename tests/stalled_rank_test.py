#!/usr/bin/env python3
"""A stalled rank (issue 31): rank 2 of 3 ranks of apps/train is stopped with SIGSTOP
mid-training (as a hung GPU or a swapping node would stall it: alive, silent, its sockets
open). Under mpiexec on every transport (shm, tcp, mpi) and under the environment launch
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) on shm and tcp, the run must end non-zero
within --comm-timeout + 10 s, and each survivor must name rank 2, its process and the
collective, not the neighbour it was waiting for (which waited for rank 2 as well).

usage: stalled_rank_test.py TRAIN MPIEXEC"""
import os
import signal
import subprocess
import sys
import time

from train_log import clean_env, free_port, until_training

train, mpiexec = sys.argv[1], sys.argv[2]
TIMEOUT = 5  # --comm-timeout, seconds
LIMIT = TIMEOUT + 10.0  # seconds from the stop to the end of the run
ARGS = ["--sync", "ddp", "--dataset", "synthetic", "--epochs", "1", "--threads", "1",
        "--eval-every", "0", "--log-every", "1", "--comm-timeout", str(TIMEOUT)]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def finish(proc):
    """proc's remaining output and exit status (None when it ran past LIMIT and was killed)."""
    try:
        return proc.communicate(timeout=LIMIT)[0], proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()[0], None


def stop(pid):
    os.kill(pid, signal.SIGSTOP)
    return time.monotonic()


def end(pid):
    """SIGKILL ends a stopped process too (SIGTERM would wait for it to be continued)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check_named(what, out, rank, pid):
    said = [l for l in out.splitlines() if f"failed on rank {rank}" in l]
    ok = any(f"rank 2 (process {pid}) did not arrive" in l and "allreduce #" in l for l in said)
    check(ok, f"{what}: rank {rank} names rank 2, its process and the collective: {said!r}")
    return ok


def show(out):
    """All a run said (under mpiexec: after training began): tells a lost line from another
    error."""
    print("\n".join(f"     | {l}" for l in out.splitlines() if "Iteration [" not in l))


for transport in ("shm", "tcp", "mpi"):
    what = f"mpiexec --transport {transport}"
    proc = subprocess.Popen([mpiexec, "-n", "3", train, *ARGS, "--transport", transport],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    seen, table = until_training(proc)
    if len(table) != 3:
        os.killpg(proc.pid, signal.SIGKILL)
        check(False, f"{what}: the log gives each rank's pid@host: {seen.strip()[-500:]!r}")
        continue
    pid = int(table[2].split("@")[0])
    stopped_at = stop(pid)
    out, status = finish(proc)
    took = time.monotonic() - stopped_at
    end(pid)
    print(f"     {what}: exit {status} {took:.2f} s after the stop")
    check(status not in (None, 0) and took < LIMIT,
          f"{what}: the run ends non-zero within {LIMIT:.0f} s ({status}, {took:.2f} s)")
    if not all([check_named(what, out, r, pid) for r in (0, 1)]):
        show(out)

for transport in ("shm", "tcp"):
    what = f"environment launch, --transport {transport}"
    port = free_port()
    procs = [subprocess.Popen([train, *ARGS, "--transport", transport],
                              env=clean_env(RANK=r, WORLD_SIZE=3, MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
             for r in range(3)]
    seen, _ = until_training(procs[0])
    stopped_at = stop(procs[2].pid)
    outs = [finish(p) for p in procs[:2]]
    outs[0] = (seen + outs[0][0], outs[0][1])  # all rank 0 said, its start-up included
    took = time.monotonic() - stopped_at
    end(procs[2].pid)
    procs[2].communicate()
    print(f"     {what}: survivors exit {[s for _, s in outs]} {took:.2f} s after the stop")
    for r, (out, status) in enumerate(outs):
        check(status == 1 and took < LIMIT,
              f"{what}: rank {r} exits 1 within {LIMIT:.0f} s ({status}, {took:.2f} s)")
        if not check_named(what, out, r, procs[2].pid):
            show(out)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
