#!/usr/bin/env python3
"""The op fixtures that tests/torch_ops_test.cpp reads are what their committed scripts make:
tests/fixtures/make_torch_ops.py and make_nonfinite.py (which share op_cases.py), run in a
temporary copy of their folder, write torch_ops.safetensors and nonfinite.safetensors byte
for byte as committed. A change to the shared helpers that moves a random draw fails here.

usage: op_fixtures_test.py FIXTURES_DIR
Exits 77 (skipped) where torch is missing or is not the version that wrote the fixtures
(the bytes depend on PyTorch's random streams and kernels)."""
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPTS = {"make_torch_ops.py": "torch_ops.safetensors",
           "make_nonfinite.py": "nonfinite.safetensors"}
HELPERS = ["op_cases.py", "safetensors_io.py"]


def main():
    fixtures = sys.argv[1]
    sys.path.insert(0, fixtures)
    try:
        import torch
        from safetensors_io import read_safetensors
    except ImportError as e:
        print(f"skipped: {e} (Debian's python3-torch makes the fixtures)")
        sys.exit(77)
    for script, name in SCRIPTS.items():
        _, meta = read_safetensors(os.path.join(fixtures, name))
        if meta["torch_version"] != torch.__version__:
            print(f"skipped: {name} was written by torch {meta['torch_version']}, "
                  f"this is {torch.__version__}")
            sys.exit(77)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for f in HELPERS + list(SCRIPTS):
            shutil.copy(os.path.join(fixtures, f), tmp)
        for script, name in SCRIPTS.items():
            subprocess.run([sys.executable, script], cwd=tmp, check=True)
            with open(os.path.join(tmp, name), "rb") as f:
                made = f.read()
            with open(os.path.join(fixtures, name), "rb") as f:
                committed = f.read()
            same = made == committed
            verdict = "as committed" if same else "DIFFERS from the committed file"
            print(f"{script}: {name} {verdict} ({len(made)} bytes made, "
                  f"{len(committed)} committed)")
            failed += not same
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
