#!/usr/bin/env python3
"""comm/'s layers depend only downward: a file under comm/<layer>/ includes from its own
layer or one below (base < bootstrap < transport < algorithms < group < ddp), never from above, and
no source lies in comm/ itself. Exits non-zero naming each include that breaks this."""
import pathlib
import re
import sys

LAYERS = ["base", "bootstrap", "transport", "algorithms", "group", "ddp"]
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".") / "comm"
include = re.compile(r'^\s*#\s*include\s*[<"](?:ringflow/)?comm/(\w+)/', re.M)

problems = []
for path in sorted(root.rglob("*")):
    if path.suffix not in {".h", ".cpp", ".cu", ".cuh"}:
        continue
    rel = path.relative_to(root)
    if len(rel.parts) != 2 or rel.parts[0] not in LAYERS:
        problems.append(f"comm/{rel}: not in a layer folder ({', '.join(LAYERS)})")
        continue
    own = LAYERS.index(rel.parts[0])
    for m in include.finditer(path.read_text()):
        layer = m.group(1)
        line = path.read_text()[: m.start()].count("\n") + 1
        if layer not in LAYERS:
            problems.append(f"comm/{rel}:{line}: includes from comm/{layer}/, not a layer")
        elif LAYERS.index(layer) > own:
            problems.append(f"comm/{rel}:{line}: {rel.parts[0]} includes from {layer}, a layer above it")

for p in problems:
    print(p)
checked = sum(1 for p in root.rglob("*") if p.suffix in {".h", ".cpp", ".cu", ".cuh"})
print(f"{checked} files under comm/, {len(problems)} breaking the layering")
sys.exit(1 if problems else 0)
