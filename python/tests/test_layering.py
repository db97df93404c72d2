"""python/ is a client of the installed C++ API only, and nothing below it knows it exists:
every ringflow header python/ includes is one that `meson install` installs (meson
introspect --installed), and no source outside python/ includes from python/."""
import json
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(os.environ.get("RINGFLOW_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("RINGFLOW_BUILD_ROOT", ROOT / "build"))
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]ringflow/([^">]+)[">]', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def test_python_includes_only_installed_headers():
    try:
        installed = json.loads(subprocess.run(["meson", "introspect", str(BUILD), "--installed"],
                                              capture_output=True, text=True, check=True).stdout)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"meson introspect {BUILD}: {e}")
    headers = {p.split("/include/ringflow/", 1)[1] for p in installed.values() if "/include/ringflow/" in p}
    assert headers, "no installed headers found"
    problems = [f"{path.relative_to(ROOT)}: ringflow/{h} is not installed"
                for path in sorted((ROOT / "python").glob("*.[ch]*"))
                for h in includes(path) if not h.startswith("python/") and h not in headers]
    assert not problems, "\n".join(problems)


def test_nothing_below_includes_python():
    problems = [str(path.relative_to(ROOT))
                for folder in ("kernels", "framework", "comm", "models", "apps")
                for path in sorted((ROOT / folder).rglob("*")) if path.suffix in {".h", ".cpp", ".cu", ".cuh"}
                if any(h.startswith("python/") for h in includes(path))]
    assert not problems, "these include from python/: " + ", ".join(problems)
