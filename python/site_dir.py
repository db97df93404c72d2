"""Prints where `meson install` puts the ringflow module, relative to the prefix given
(argv[1]), for the Python running this script.

Meson 1.0 takes Debian's deb_system scheme (lib/python3/dist-packages), which only /usr's
Python reads. For any other prefix Debian's Python reads <prefix>/lib/python3.X/dist-packages
(/usr/local's by its posix_local scheme, any other once on PYTHONPATH), so the module goes
there. Elsewhere (no deb_system scheme): the Python's own platlib, as Meson takes it."""
import sys
import sysconfig

if "deb_system" in sysconfig.get_scheme_names():
    if sys.argv[1] == "/usr":
        print("lib/python3/dist-packages")
    else:
        print("lib/python%d.%d/dist-packages" % sys.version_info[:2])
else:
    empty = dict.fromkeys(["base", "platbase", "installed_base", "installed_platbase"], "")
    print(sysconfig.get_path("platlib", vars=empty).lstrip("/"))
