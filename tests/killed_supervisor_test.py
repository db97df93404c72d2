#!/usr/bin/env python3
"""A rank's supervisor killed alone (issue 31): under mpiexec, each rank of apps/train runs
under a supervisor process (comm/bootstrap/rank_supervisor.h), the pid Hydra knows. When
rank 2's supervisor is SIGKILLed mid-training, Hydra kills the other ranks at once; rank 2
must say first that its supervisor died, naming both processes, and the run must end
non-zero within 10 s, with no rank 2 message blaming the ranks Hydra killed.

usage: killed_supervisor_test.py TRAIN MPIEXEC"""
import os
import signal
import subprocess
import sys
import time

from train_log import clean_env, until_training

train, mpiexec = sys.argv[1], sys.argv[2]
LIMIT = 10.0  # seconds from the kill to the end of the run
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


proc = subprocess.Popen([mpiexec, "-n", "3", train, "--sync", "ddp", "--dataset", "synthetic",
                         "--epochs", "3", "--threads", "1", "--eval-every", "0", "--log-every", "1"],
                        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        start_new_session=True)
seen, table = until_training(proc)
if len(table) != 3:
    os.killpg(proc.pid, signal.SIGKILL)
    check(False, f"the log gives each rank's pid@host: {seen.strip()[-500:]!r}")
else:
    pid = int(table[2].split("@")[0])
    supervisor = parent_of(pid)
    killed_at = time.monotonic()
    os.kill(supervisor, signal.SIGKILL)
    try:
        out, status = proc.communicate(timeout=LIMIT)[0], proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, status = proc.communicate()[0], None
    took = time.monotonic() - killed_at
    print(f"     rank 2 (process {pid}), supervisor {supervisor}: exit {status} {took:.2f} s "
          "after the kill")
    check(status not in (None, 0) and took < LIMIT,
          f"the run ends non-zero within {LIMIT:.0f} s ({status}, {took:.2f} s)")
    check(f"rank 2 (process {pid}): its supervisor (process {supervisor}) has died" in out,
          f"rank 2 names itself and its supervisor: {out.strip()[-600:]!r}")
    blamed = [l for l in out.splitlines() if "failed on rank 2" in l]
    check(not blamed, f"rank 2 blames no other rank: {blamed!r}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
