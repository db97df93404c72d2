"""ringflow.distributed with 2 ranks started by mpiexec and by torchrun (ddp_worker.py):
collectives and DistributedDataParallel over a Python Module subclass, against one
process's training; the GIL released while a collective waits; a destroyed group refusing
collectives."""
import os
import pathlib
import socket
import subprocess
import sys

import pytest

import ringflow as rf

MPIEXEC = os.environ.get("RINGFLOW_MPIEXEC", "mpiexec")


WORKER = str(pathlib.Path(__file__).with_name("ddp_worker.py"))


def run(command, timeout=240):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 of 2: ok" in r.stdout and "rank 1 of 2: ok" in r.stdout


def test_two_ranks_under_mpiexec(tmp_path):
    run([MPIEXEC, "-n", "2", sys.executable, WORKER, str(tmp_path)])


def test_two_ranks_under_torchrun(tmp_path):
    pytest.importorskip("torch")
    with socket.socket() as s:  # a free port for torchrun's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --redirects/--tee: Debian's torch 1.13 fails to report exits without them.
    run([sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "--monitor_interval",
         "0.2", "--master_addr", "127.0.0.1", "--master_port", str(port), "--nproc_per_node", "2", WORKER,
         str(tmp_path)])


def test_one_process_without_a_launcher():
    assert not rf.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        rf.distributed.get_rank()


def test_names_refused_at_the_call_naming_the_choices():
    with pytest.raises(ValueError, match=r"transport 'infiniband' \(choices: auto, shm, hybrid, tcp, mpi\)"):
        rf.distributed.init_process_group(transport="infiniband")
    with pytest.raises(ValueError, match=r"backend 'gloo' \(choices: auto, mpi, nccl\)"):
        rf.distributed.init_process_group("gloo")
    assert not rf.distributed.is_initialized()
    with pytest.raises(ValueError, match=r"comm_hook 'bf8' \(choices: allreduce, fp16, noop\)"):
        rf.distributed.DistributedDataParallel(rf.nn.Linear(2, 2), comm_hook="bf8")
