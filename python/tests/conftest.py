"""pytest set-up for ringflow's Python tests: the module built in build/python when meson test
has not put it on the path already (pytest run by hand from the source tree)."""
import pathlib
import sys

try:
    import ringflow  # noqa: F401
except ImportError:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "build" / "python"))
