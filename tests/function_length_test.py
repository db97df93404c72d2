#!/usr/bin/env python3
"""No function in comm/ or apps/ longer than 120 lines (issue 15): a function starts at a
line that begins at column 0 with a name and ends at the brace that closes the one its
signature opens. Exits non-zero naming each longer one.

usage: function_length_test.py SOURCE_ROOT"""
import pathlib
import re
import sys

LIMIT = 120
FOLDERS = ["comm", "apps"]
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
start = re.compile(r"^[A-Za-z_][\w:<>,*&\s]*[\w>*&]\s+[\w:~]+\(|^[\w:~]+::[\w~]+\(")

longest = []
for folder in FOLDERS:
    for path in sorted((root / folder).rglob("*")):
        if path.suffix not in {".cpp", ".h", ".cu"}:
            continue
        lines = path.read_text().split("\n")
        i = 0
        while i < len(lines):
            if not start.match(lines[i]) or lines[i].rstrip().endswith(";"):
                i += 1
                continue
            # The signature may span lines; the body opens at the first '{' after it.
            j = i
            while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j >= len(lines) or "{" not in lines[j]:
                i = j + 1
                continue
            depth, k = 0, j
            while k < len(lines):
                depth += lines[k].count("{") - lines[k].count("}")
                if depth <= 0:
                    break
                k += 1
            n = k - i + 1
            longest.append((n, f"{path.relative_to(root)}:{i + 1}", lines[i].strip()[:70]))
            i = k + 1

longest.sort(reverse=True)
over = [x for x in longest if x[0] > LIMIT]
for n, where, what in over:
    print(f"{where}: {n} lines (limit {LIMIT}): {what}")
print(f"{len(longest)} functions in {', '.join(FOLDERS)}; the longest {longest[0][0]} lines "
      f"({longest[0][1]}); {len(over)} over {LIMIT}")
sys.exit(1 if over else 0)
