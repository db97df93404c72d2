"""examples/python/train.py against build/apps/train: with the same seed and flags, the same
loss at every iteration, bit for bit (the JSON metrics' doubles compared for equality), alone
and under mpiexec -n 2 with DDP."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import ringflow as rf

ROOT = pathlib.Path(os.environ.get("RINGFLOW_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[2]))
TRAIN = os.environ.get("RINGFLOW_TRAIN", str(ROOT / "build" / "apps" / "train"))
MPIEXEC = os.environ.get("RINGFLOW_MPIEXEC", "mpiexec")
FLAGS = ["--epochs", "1", "--max-iters", "20", "--log-every", "1", "--eval-every", "0", "--seed", "3", "--threads", "1"]

pytestmark = pytest.mark.skipif(not os.path.isdir(rf.data.FASHION_MNIST_DIR),
                                reason="no Fashion-MNIST (dataset-fashion-mnist)")


def losses(path):
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return [r["loss"] for r in records if r.get("type") == "iteration"]


def run(command, env=None):
    r = subprocess.run(command, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {})))
    assert r.returncode == 0, f"{command}: {r.stdout}{r.stderr}"
    return r.stdout


def test_same_losses_as_the_app(tmp_path):
    run([TRAIN, *FLAGS, "--metrics", str(tmp_path / "app.jsonl")])
    out = run([sys.executable, str(ROOT / "examples" / "python" / "train.py"), *FLAGS,
               "--metrics", str(tmp_path / "py.jsonl")])
    ours, app = losses(tmp_path / "py.jsonl"), losses(tmp_path / "app.jsonl")
    assert len(app) == 20 and ours == app
    assert "Epoch [1], Iteration [20/20], Loss:" in out


def test_same_losses_as_the_app_under_ddp(tmp_path):
    env = {"OMP_NUM_THREADS": "1"}
    run([MPIEXEC, "-n", "2", TRAIN, *FLAGS, "--sync", "ddp", "--metrics", str(tmp_path / "app.jsonl")], env)
    run([MPIEXEC, "-n", "2", sys.executable, str(ROOT / "examples" / "python" / "train.py"), *FLAGS,
         "--metrics", str(tmp_path / "py.jsonl")], env)
    ours, app = losses(tmp_path / "py.jsonl"), losses(tmp_path / "app.jsonl")
    assert len(app) == 20 and ours == app
