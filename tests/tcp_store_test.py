#!/usr/bin/env python3
"""Our TCPStore client (comm/bootstrap/tcp_store_client.h) against PyTorch's own server
(Debian's python3-torch; any PyTorch works): this script starts
torch.distributed.TCPStore as a server, in each backend the installed PyTorch has (the
classic one; libuv's too where there is one, the default since 2.4), sets keys through
torch's client, runs the doctest cases of tests/tcp_store_test.cpp against it, then reads
through torch's client what they set. Exits 77 (a skip, for meson), saying why, where
PyTorch is missing.

usage: tcp_store_test.py TCP_STORE_TEST_EXE"""
import os
import subprocess
import sys
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is needed for its TCPStore server ({e}); on Debian: "
          "apt-get install python3-torch")
    sys.exit(77)

exe = sys.argv[1]
version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
# VALIDATE came first, renumbering the commands, during 2.1's development (Note [TCPStore
# dialects]); which of 2.1 and 2.2 shipped it is not checked here: either is taken.
dialect = "torch1" if version < (2, 1) else "torch2" if version >= (2, 3) else "any"
failures = []


def server(**backend):
    return dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60),
                         wait_for_workers=False, **backend)


backends = [{}]
try:  # PyTorch 2.2 and later: the libuv server beside the classic one
    server(use_libuv=True)
    backends = [{"use_libuv": False}, {"use_libuv": True}]
except (TypeError, RuntimeError):
    pass


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


for backend in backends:
    what = f"PyTorch {torch.__version__} TCPStore {backend or '(classic)'}"
    store = server(**backend)
    store.set("py/greeting", "set by torch")
    store.add("py/counter", 5)
    env = dict(os.environ, RINGFLOW_TCPSTORE=f"127.0.0.1:{store.port}",
               RINGFLOW_TCPSTORE_DIALECT=dialect)
    run = subprocess.run([exe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120)
    print(run.stdout)
    check(run.returncode == 0 and "SKIP" not in run.stdout,
          f"{what}: the client's cases pass (exit {run.returncode})")
    # What the client set, as torch's own client reads it; the server outlived the probe.
    check(store.get("cpp/value") == b"set by ringflow\x00\xff", f"{what}: torch reads our set")
    check(store.get("py/counter") == b"8", f"{what}: torch reads 5 + our add of 3")
    check(store.get("cpp/no_rank1/rank0_address").startswith(b"127.0.0.1:"),
          f"{what}: torch reads the address rank 0 published")
    del store

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
