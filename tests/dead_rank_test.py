#!/usr/bin/env python3
"""A dead rank across nodes (issue 17): 3 ranks of apps/train on 3 emulated hosts
(bench/cluster, MPICH over TCP between network namespaces), rank 2 killed with SIGKILL
mid-training. With `mpiexec -disable-auto-cleanup`, over our ring (TCP transport) and over
MPI's own allreduce (which reports nothing of a dead peer: PeerWatch's liveness links do),
with the default mpiexec and with -disable-auto-cleanup, both survivors name rank 2, its
process and host, and the collective, and the run ends non-zero within 10 s.
Then rank 2's host is cut from the network instead: the survivors name it unreachable
(keepalive) within 10 s. Then rank 2 is stopped (SIGSTOP) instead (issue 31): over MPI's
allreduce with --comm-timeout 4, the run ends within 14 s, both survivors naming rank 2 as
the rank that did not arrive. Exit 77 (skipped) where bench/cluster cannot make namespaces.

usage: dead_rank_test.py CLUSTER TRAIN"""
import os
import signal
import subprocess
import sys
import threading
import time

from train_log import until_training

cluster, train = sys.argv[1], sys.argv[2]
failures = []
LIMIT = 10.0  # seconds from the fault to the survivors' exit


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(sync_args, cleanup, fault, comm_timeout=120, limit=LIMIT):
    """Starts the run, applies fault(host_of_rank_2, pid_of_rank_2) once training is under
    way, and returns (exit status or None if still running at limit, seconds, output after
    the fault, pid, host)."""
    flags = [] if cleanup else ["--mpiexec-flag", "-disable-auto-cleanup"]
    cmd = [cluster, "--hosts", "3", "--rate", "none", "--skip-code", "77", *flags, "--", train,
           "--epochs", "1", "--threads", "1", "--eval-every", "0", "--log-every", "1",
           "--comm-timeout", str(comm_timeout), *sync_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen, table = until_training(proc)
    if proc.poll() == 77 or (not table and "cannot emulate a cluster" in seen):
        print(seen.strip())
        sys.exit(77)
    if len(table) != 3:
        proc.kill()
        check(False, f"the log gives each rank's pid@host: {seen.strip()[-500:]!r}")
        return None, 0, "", 0, ""
    pid, host = int(table[2].split("@")[0]), table[2].split("@")[1]
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    faulted_at = time.monotonic()
    fault(host, pid)
    reader.start()
    try:
        status = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        status = None
    took = time.monotonic() - faulted_at
    if status is None:  # tear the cluster down (its trap ends every rank)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            os.kill(pid, signal.SIGKILL)  # a stopped rank would wait for SIGTERM for ever
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
    reader.join(timeout=10)
    return status, took, "".join(lines), pid, host


def kill(host, pid):
    os.kill(pid, signal.SIGKILL)


def cut(host, pid):
    subprocess.run(["ip", "netns", "exec", host, "ip", "link", "set", "eth0", "down"], check=True)


SYNCS = {"ring over TCP": ["--sync", "ddp"],
         "MPI_Iallreduce": ["--sync", "allreduce", "--algo", "native"]}

for name, sync in SYNCS.items():
    for cleanup in (False, True):
        status, took, out, pid, host = run(sync, cleanup=cleanup, fault=kill)
        what = f"{name}, {'default mpiexec' if cleanup else '-disable-auto-cleanup'}, rank 2 killed"
        print(f"     {what}: exit {status} {took:.2f} s after the kill")
        check(status not in (None, 0) and took < LIMIT,
              f"{what}: the run ends non-zero within {LIMIT:.0f} s")
        for r in (0, 1):
            said = [l for l in out.splitlines() if f"failed on rank {r}" in l]
            check(any(f"rank 2 (process {pid} on {host}) has exited" in l and "allreduce #" in l
                      for l in said),
                  f"{what}: rank {r} names rank 2, its host and the collective: {said!r}")

status, took, out, pid, host = run(SYNCS["MPI_Iallreduce"], cleanup=False, fault=cut)
what = "MPI_Iallreduce, rank 2's host cut from the network"
named = [l for l in out.splitlines() if f"rank 2 (process {pid} on {host}) is unreachable" in l]
print(f"     {what}: {len(named)} survivors named it; run ended: {status is not None}")
for r in (0, 1):
    ok = any(f"failed on rank {r}" in l for l in named)
    check(ok, f"{what}: rank {r} names rank 2 unreachable within {LIMIT:.0f} s"
          + ("" if ok else f": {out.strip()[-600:]!r}"))

STALL_TIMEOUT = 4  # --comm-timeout of the stalled run, seconds
status, took, out, pid, host = run(SYNCS["MPI_Iallreduce"], cleanup=True, comm_timeout=STALL_TIMEOUT,
                                   limit=STALL_TIMEOUT + 10.0,
                                   fault=lambda host, pid: os.kill(pid, signal.SIGSTOP))
what = "MPI_Iallreduce, rank 2 stopped"
print(f"     {what}: exit {status} {took:.2f} s after the stop")
check(status not in (None, 0), f"{what}: the run ends non-zero within {STALL_TIMEOUT + 10} s")
for r in (0, 1):
    said = [l for l in out.splitlines() if f"on rank {r}" in l and "allreduce #" in l]
    check(any(f"rank 2 (process {pid} on {host}) did not arrive" in l for l in said),
          f"{what}: rank {r} names rank 2, its host and the collective: {said!r}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
