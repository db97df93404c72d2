"""ringflow.distributed under mpiexec -n 2 (ddp_worker.py): collectives and
DistributedDataParallel over a Python Module subclass, against one process's training."""
import os
import pathlib
import subprocess
import sys

import pytest

import ringflow as rf

MPIEXEC = os.environ.get("RINGFLOW_MPIEXEC", "mpiexec")


def run_ranks(n, *args, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_two_ranks():
    r = run_ranks(2, str(pathlib.Path(__file__).with_name("ddp_worker.py")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 of 2: ok" in r.stdout and "rank 1 of 2: ok" in r.stdout


def test_one_process_without_a_launcher():
    assert not rf.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        rf.distributed.get_rank()
