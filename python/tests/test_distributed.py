"""ringflow.distributed with 2 ranks started by mpiexec and by torchrun (ddp_worker.py):
collectives and DistributedDataParallel over a Python Module subclass, against one
process's training; the GIL released while a collective waits; a destroyed group refusing
collectives; a rank that fails ending the run at once with its error."""
import os
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

import ringflow as rf

MPIEXEC = os.environ.get("RINGFLOW_MPIEXEC", "mpiexec")


WORKER = str(pathlib.Path(__file__).with_name("ddp_worker.py"))


def launch(command, timeout):
    """command's exit status, stdout and stderr. Past timeout the launcher and its ranks (a
    session of their own) are killed, and the test fails saying so."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"still running after {timeout} s: {command}\n{out}{err}")
    return p.returncode, out, err


def mpiexec(*args, script=WORKER):
    return [MPIEXEC, "-n", "2", sys.executable, script, *args]


def torchrun(*args, script=WORKER):
    pytest.importorskip("torch")
    with socket.socket() as s:  # a free port for torchrun's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # --redirects/--tee: Debian's torch 1.13 fails to report exits without them.
    return [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "--monitor_interval",
            "0.2", "--master_addr", "127.0.0.1", "--master_port", str(port), "--nproc_per_node", "2", script, *args]


@pytest.mark.parametrize("launcher", [mpiexec, torchrun], ids=["mpiexec", "torchrun"])
def test_two_ranks(tmp_path, launcher):
    code, out, err = launch(launcher(str(tmp_path)), timeout=240)
    assert code == 0, out + err
    assert "rank 0 of 2: ok" in out and "rank 1 of 2: ok" in out


@pytest.mark.parametrize("launcher", [mpiexec, torchrun], ids=["mpiexec", "torchrun"])
def test_a_failing_rank_ends_the_run_with_its_error(tmp_path, launcher):
    """Rank 1 fails while rank 0 waits for it in all_reduce: the run ends well before the
    240 s a whole run is given (a rank that exited normally waited in MPI_Finalize, and
    rank 0 in all_reduce, until then), non-zero, with rank 1's message."""
    code, out, err = launch(launcher(str(tmp_path), "--fail-on-rank", "1"), timeout=60)
    assert code != 0, out + err
    assert "rank 1: failing on purpose (--fail-on-rank)" in out + err


@pytest.mark.parametrize("launcher", [mpiexec, torchrun], ids=["mpiexec", "torchrun"])
def test_an_uncaught_exception_ends_the_job(launcher):
    """Rank 1 raises and does not catch it while rank 0 waits in all_reduce: the job ends at
    once (Note [a rank that raises] in python/distributed.cpp), non-zero, with the traceback;
    before, rank 1 waited in MPI_Finalize under mpiexec until the test's timeout."""
    code, out, err = launch(launcher(script=str(pathlib.Path(__file__).with_name("raising_worker.py"))),
                            timeout=60)
    assert code != 0, out + err
    assert "RuntimeError: rank 1: failing on purpose" in out + err
    assert "all_reduce returned" not in out


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
