"""bench/train_step's PyTorch side: bench/torch_reference.py answers runs as a server (--serve,
what train_step keeps for a whole GPU run), and train_step's requests come back as the runs it
asked for (model, layout, glibc's tunables), on the CPU each in a process of its own. A Python
that cannot run the script leaves PyTorch's columns empty, saying why, without a hang.
Skipped (77) without torch in /usr/bin/python3.

    tests/train_step_torch_test.py BUILD/bench/train_step SOURCE/bench/torch_reference.py
"""
import json
import subprocess
import sys

PYTHON = "/usr/bin/python3"
RUN = "--model small_cnn --batch 4 --threads 1 --steps 1 --warmup 1"


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def check(failures, ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def main():
    train_step, script = sys.argv[1], sys.argv[2]
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        print("SKIP: no torch in " + PYTHON)
        return 77
    failures = []

    requests = ["--model nope --batch 4", RUN, "--serve", RUN + " --memory-format channels_last"]
    served = subprocess.run([PYTHON, script, "--serve"], input="\n".join(requests) + "\n", capture_output=True,
                            text=True, timeout=300)
    answers = json_lines(served.stdout)
    check(failures, served.returncode == 0 and len(answers) == 4, f"--serve answers each of 4 requests, exit 0 "
          f"(exit {served.returncode}, {len(answers)} answers)")
    if len(answers) == 4:
        check(failures, "error" in answers[0] and "error" in answers[2], "a bad request and --serve are errors")
        check(failures, answers[1].get("step_ms", 0) > 0 and "start_s" in answers[1], "the first run is timed, "
              "with the imports' seconds")
        check(failures, answers[3].get("memory_format") == "channels_last" and "start_s" not in answers[3],
              "a later run keeps its own flags; only the first answer counts the imports")

    run = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                          "--warmup", "1", "--torch-channels-last", "--json", "--torch-script", script],
                         capture_output=True, text=True, timeout=600)
    rows = json_lines(run.stdout)
    check(failures, run.returncode == 0 and len(rows) == 1, f"train_step: one row, exit 0 (exit {run.returncode})")
    if rows:
        r = rows[0]
        expect = {"torch": ("contiguous", ""), "torch_channels_last": ("channels_last", ""),
                  "torch_malloc_tunable": ("contiguous", "glibc.malloc.mmap_max=0")}
        for column, (layout, tunables) in expect.items():
            j = r.get(column) or {}
            check(failures, j.get("model") == "small_cnn" and j.get("batch") == 8 and j.get("memory_format") == layout
                  and j.get("glibc_tunables", "").startswith(tunables) and j.get("step_ms", 0) > 0,
                  f"{column}: the run asked for ({layout}{', ' + tunables if tunables else ''})")
        # On the CPU each run is a process of its own: each answer counts its imports.
        check(failures, all("start_s" in (r.get(c) or {}) for c in expect), "CPU: a process per run")

    broken = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                             "--warmup", "0", "--json", "--python", "/bin/false", "--torch-script", script],
                            capture_output=True, text=True, timeout=300)
    rows = json_lines(broken.stdout)
    check(failures, broken.returncode == 0 and len(rows) == 1 and rows[0]["torch"] is None
          and "ended (status 1) before answering" in broken.stderr,
          f"a Python that fails: empty PyTorch columns and why (exit {broken.returncode}; {broken.stderr.strip()[:200]})")

    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
