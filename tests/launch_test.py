#!/usr/bin/env python3
"""Ranks of apps/train started by environment variables alone (torchrun's convention:
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no mpiexec, no MPI) train --sync ddp exactly
as the same ranks started by mpiexec: every iteration's loss equal to the last bit. A rank
started alone says what it waits for within 10 s, then ends in a clear error and a non-zero
exit at the timeout, as does a RANK out of range at once; and a rank killed mid-training is named by both survivors, which exit non-zero long before the
collective's timeout; under mpiexec too, with and without its clean-up.

usage: launch_test.py TRAIN MPIEXEC KEEP_GOING KEEP_GOING_EXIT_STATUS
KEEP_GOING: the launcher's flag that lets the job go on when a rank dies (Hydra's
-disable-auto-cleanup, Open MPI's --enable-recovery); KEEP_GOING_EXIT_STATUS: 1 where the
launcher's exit status then still tells that ranks failed, 0 where it does not (Open MPI)."""
import itertools
import os
import re
import subprocess
import sys
import tempfile

from train_log import clean_env, free_port, losses, until_training

train, mpiexec, keep_going, keep_going_exit_status = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
ARGS = ["--sync", "ddp", "--epochs", "1", "--max-iters", "4", "--threads", "1",
        "--eval-every", "0", "--log-every", "1"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def env_run(n, metrics, extra_args=(), ranks=None, timeout=120):
    port = free_port()
    procs = []
    for r in (range(n) if ranks is None else ranks):
        env = clean_env(RANK=r, WORLD_SIZE=n, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                        LOCAL_RANK=r)
        procs.append(subprocess.Popen([train, *ARGS, "--metrics", metrics, *extra_args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], outs


with tempfile.TemporaryDirectory() as tmp:
    for n in (2, 3):
        env_metrics, mpi_metrics = f"{tmp}/env{n}.json", f"{tmp}/mpi{n}.json"
        codes, outs = env_run(n, env_metrics)
        check(codes == [0] * n, f"{n} ranks by environment variables: exit codes {codes}")
        check("ranks started by torchrun variables" in outs[0],
              f"{n} ranks: the log says how the ranks were started")
        mpi = subprocess.run([mpiexec, "-n", str(n), train, *ARGS, "--metrics", mpi_metrics],
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=120)
        check(mpi.returncode == 0, f"{n} ranks by mpiexec: exit code {mpi.returncode}")
        a, b = losses(env_metrics), losses(mpi_metrics)
        check(len(a) == 4 and a == b,
              f"{n} ranks: losses by environment variables {a} == by mpiexec {b}")
        if failures:
            print(outs[0][-2000:], mpi.stdout[-2000:], sep="\n")

    # A rank alone (RANK=0 WORLD_SIZE=2, and RANK=1 WORLD_SIZE=2 elsewhere): each says what
    # it waits for after 5 s (rank 0 which ranks, where), then names it at the timeout.
    alone = [subprocess.Popen([train, *ARGS, "--comm-timeout", "7"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=clean_env(RANK=r, WORLD_SIZE=2, MASTER_PORT=free_port()))
             for r in (0, 1)]
    outs = [p.communicate(timeout=60)[0] for p in alone]
    said = {0: r"ringflow: rank 0 of 2: waiting \d+ s \(timeout 7 s\) for rank\(s\) 1 to "
               r"connect to port \d+ of this host$",
            1: r"ringflow: rank 1 of 2: waiting \d+ s \(timeout 7 s\) for rank 0 to listen at "
               r"127\.0\.0\.1:\d+ \(Connection refused\)$"}
    ends = {0: "timed out after 7000 ms waiting for rank(s) 1 to connect",
            1: "could not reach rank 0 within 7000 ms: Connection refused"}
    for r, p in enumerate(alone):
        lines = outs[r].splitlines()
        check(p.returncode == 1 and any(re.match(said[r], l) for l in lines)
              and ends[r] in lines[-1],
              f"rank {r} alone says what it waits for, then names it: exit {p.returncode}, "
              f"{outs[r].strip()[-400:]!r}")
    # A RANK outside WORLD_SIZE is named before anything starts.
    bad = subprocess.run([train, *ARGS], env=clean_env(RANK=2, WORLD_SIZE=2), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    check(bad.returncode != 0 and "RANK='2' is not an integer in 0..1" in bad.stdout,
          f"a RANK out of range is named: exit {bad.returncode}, {bad.stdout.strip()[-200:]!r}")

    # Rank 2 of 3 killed mid-training: both survivors name it (and the collective) and exit.
    import signal
    import time
    port = free_port()
    procs = [subprocess.Popen([train, "--sync", "ddp", "--epochs", "1", "--threads", "1",
                               "--eval-every", "0", "--log-every", "1", "--comm-timeout", "120"],
                              env=clean_env(RANK=r, WORLD_SIZE=3, MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(3)]
    seen, _ = until_training(procs[0])  # training is under way on every rank
    killed_at = time.monotonic()
    procs[2].send_signal(signal.SIGKILL)
    outs = [seen + procs[0].communicate(timeout=100)[0], procs[1].communicate(timeout=100)[0]]
    took = time.monotonic() - killed_at
    procs[2].wait()
    print(f"     survivors exited {took:.2f} s after the kill")
    for r, out in enumerate(outs):
        check(procs[r].returncode == 1, f"rank {r} exits 1 after rank 2 was killed: {procs[r].returncode}")
        check(f"rank 2 (process {procs[2].pid}) has exited" in out and "allreduce #" in out,
              f"rank {r} names rank 2 and the collective: {out.strip()[-300:]!r}")
    check(took < 60, f"the survivors exit long before the 120 s timeout ({took:.2f} s)")

    # Under mpiexec, rank 2 killed through the pid the log's table gives for it.
    for cleanup, transport in itertools.product(([], [keep_going]), ("shm", "tcp")):
        what = " ".join(["mpiexec", *cleanup, "--transport", transport])
        proc = subprocess.Popen([mpiexec, *cleanup, "-n", "3", train, "--sync", "ddp", "--epochs",
                                 "1", "--threads", "1", "--eval-every", "0", "--log-every", "1",
                                 "--comm-timeout", "120", "--transport", transport],
                                env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        seen, table = until_training(proc)
        check(len(table) == 3, f"{what}: the log gives each rank's pid@host: {table}")
        if len(table) != 3:
            proc.kill()
            print(seen[-2000:], proc.communicate()[0][-2000:], sep="\n")
            continue
        pid = int(table[2].split("@")[0])
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        out = proc.communicate(timeout=100)[0]
        took = time.monotonic() - killed_at
        print(f"     {what}: exited {took:.2f} s after the kill")
        status_tells = keep_going_exit_status or not cleanup
        check((proc.returncode != 0 or not status_tells) and took < 10,
              f"{what}: exit {proc.returncode} "
              f"({'non-zero' if status_tells else 'not checked: KEEP_GOING_EXIT_STATUS is 0'}) "
              f"within 10 s ({took:.2f} s)")
        # Hydra and Open MPI's mpirun kill a node's ranks when they reap one killed by a
        # signal; each rank's supervisor (comm/bootstrap/rank_supervisor.h) holds that back
        # until they reported.
        for r in (0, 1):
            said = [l for l in out.splitlines() if f"failed on rank {r}" in l]
            # The collective is DDP's buffer broadcast or its allreduce, as the kill falls.
            check(any(f"rank 2 (process {pid}) has exited" in l
                      and re.search(r"(allreduce|broadcast) #\d+", l)
                      for l in said), f"{what}: rank {r} names rank 2 and the collective: {said!r}")

    # A failure every rank meets (no data set): the ranks' supervisors stop waiting for the
    # others' reports as soon as no rank runs, so the job ends at once, not after the grace.
    started = time.monotonic()
    bad = subprocess.run([mpiexec, "-n", "2", train, *ARGS, "--data-dir", tmp],
                         env=clean_env(), capture_output=True, text=True, timeout=100)
    took = time.monotonic() - started
    check(bad.returncode != 0 and "train-images-idx3-ubyte" in bad.stderr and took < 5,
          f"mpiexec, a missing data set: exit {bad.returncode} after {took:.2f} s, {bad.stderr.strip()!r}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
