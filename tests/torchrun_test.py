#!/usr/bin/env python3
"""Ranks of apps/train started as torchrun starts them train --sync ddp to the same losses
as under mpiexec, every iteration's to the last bit:
- with the variables of torchrun's static --master_addr/--master_port form
  (TORCHELASTIC_USE_AGENT_STORE=True, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT) while PyTorch's
  own TCPStore server holds MASTER_PORT, as torchrun's agent does; twice on one store, as
  a first group and a restarted one, each under its own keys;
- under torchrun itself (python3 -m torch.distributed.run): its static form, --standalone
  and c10d rendezvous.
And ranks started alone through a store say what they wait for within 10 s (rank 0 which
ranks and at which address, the others rank 0's key in the store), then end with a clear
error at --comm-timeout. Exits 77 (a skip, for meson), saying why, where PyTorch is missing.

usage: torchrun_test.py TRAIN MPIEXEC"""
import re
import socket
import subprocess
import sys
import tempfile
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is needed for its TCPStore server and torchrun ({e}); on Debian: "
          "apt-get install python3-torch")
    sys.exit(77)

from train_log import clean_env, free_port, losses

train, mpiexec = sys.argv[1], sys.argv[2]
version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
ARGS = ["--sync", "ddp", "--epochs", "1", "--max-iters", "4", "--threads", "1",
        "--eval-every", "0", "--log-every", "1"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def agent_env(rank, port, run_id, restart):
    """What torchrun's static form gives each of 2 workers on one node."""
    return clean_env(TORCHELASTIC_USE_AGENT_STORE="True", RANK=rank, WORLD_SIZE=2,
                     LOCAL_RANK=rank, LOCAL_WORLD_SIZE=2, GROUP_RANK=0, MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=port, TORCHELASTIC_RUN_ID=run_id,
                     TORCHELASTIC_RESTART_COUNT=restart, TORCHELASTIC_MAX_RESTARTS=3)


def run_all(procs, timeout=120):
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], outs


def start(args, env):
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def torchrun(form, metrics):
    """python3 -m torch.distributed.run with 2 workers of train. --redirects/--tee: Debian's
    1.13 on Python 3.11 cannot parse their default "0" (enum.IntFlag no longer lists 0)."""
    return start([sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                  "--monitor_interval", "0.2", *form, "--nproc_per_node", "2", "--no_python",
                  train, *ARGS, "--metrics", metrics], clean_env())


with tempfile.TemporaryDirectory() as tmp:
    mpi = subprocess.run([mpiexec, "-n", "2", train, *ARGS, "--metrics", f"{tmp}/mpi.json"],
                         env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120)
    reference = losses(f"{tmp}/mpi.json")
    check(mpi.returncode == 0 and len(reference) == 4,
          f"under mpiexec: exit {mpi.returncode}, losses {reference}")

    # The static form's variables, with PyTorch's TCPStore holding MASTER_PORT.
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=120),
                          wait_for_workers=False)
    for restart in (0, 1):
        metrics = f"{tmp}/agent{restart}.json"
        codes, outs = run_all([start([train, *ARGS, "--metrics", metrics],
                                     agent_env(r, store.port, "job7", restart)) for r in (0, 1)])
        got = losses(metrics)
        check(codes == [0, 0] and got == reference,
              f"agent store, restart {restart}: exit {codes}, losses {got} == mpiexec's")
        check("and its agent's TCPStore (TORCHELASTIC_USE_AGENT_STORE)" in outs[0],
              f"agent store, restart {restart}: the log says the ranks met through the store")
        if codes != [0, 0]:
            print(*(o[-2000:] for o in outs), sep="\n")
    published = [store.get(f"ringflow/job7/attempt_{a}/rank0_address") for a in (0, 1)]
    check(all(p.startswith(b"127.0.0.1:") for p in published),
          f"each attempt's rank 0 published under its own key: {published}")

    # torchrun itself, in its forms. 1.13's --standalone takes port 29400 of this host.
    forms = {"static": ["--nnodes", "1", "--master_addr", "127.0.0.1",
                        "--master_port", str(free_port())],
             "c10d": ["--nnodes", "1", "--rdzv_backend", "c10d",
                      "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--rdzv_id", "ringflow"],
             "standalone": ["--standalone"]}
    with socket.socket() as s:
        if version < (2, 0) and s.connect_ex(("127.0.0.1", 29400)) == 0:
            print("note: port 29400 is taken, which torchrun 1.13's --standalone needs: not run")
            del forms["standalone"]
    for name, form in forms.items():
        metrics = f"{tmp}/torchrun_{name}.json"
        codes, outs = run_all([torchrun(form, metrics)])
        got = losses(metrics)
        check(codes == [0] and got == reference,
              f"torchrun {' '.join(form)}: exit {codes}, losses {got} == mpiexec's")
        if codes != [0]:
            print(outs[0][-3000:])

    # Ranks alone, through the store: what each waits for, then the error at the timeout.
    alone = {0: agent_env(0, store.port, "alone0", 0), 1: agent_env(1, store.port, "alone1", 0)}
    codes, outs = run_all([start([train, *ARGS, "--comm-timeout", "7"], alone[r]) for r in (0, 1)])
    said = {0: r"ringflow: rank 0 of 2: waiting \d+ s \(timeout 7 s\) for rank\(s\) 1 to "
               r"connect to 127\.0\.0\.1:\d+, published in the TCPStore at "
               rf"127\.0\.0\.1:{store.port}$",
            1: r"ringflow: rank 1 of 2: waiting \d+ s \(timeout 7 s\) for rank 0 to publish its "
               r"address: key\(s\) ringflow/alone1/attempt_0/rank0_address in the TCPStore at "
               rf"127\.0\.0\.1:{store.port}$"}
    ends = {0: "timed out after 7000 ms waiting for rank(s) 1",
            1: "rank 0 did not publish its address (key ringflow/alone1/attempt_0/rank0_address)"
               " within 7000 ms"}
    for r in (0, 1):
        lines = outs[r].splitlines()
        check(codes[r] == 1 and any(re.match(said[r], l) for l in lines) and ends[r] in lines[-1],
              f"rank {r} alone with the store says what it waits for, then names it: exit "
              f"{codes[r]}, {outs[r].strip()[-500:]!r}")
    # No store at all where torchrun's variables say there is one.
    codes, outs = run_all([start([train, *ARGS, "--comm-timeout", "3"],
                                 agent_env(0, free_port(), "nostore", 0))])
    check(codes == [1] and "Connection refused" in outs[0] and "TCPStore at 127.0.0.1:" in outs[0],
          f"no store at MASTER_PORT is named: exit {codes}, {outs[0].strip()[-300:]!r}")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
