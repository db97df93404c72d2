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
import tempfile

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

    requests = [RUN, "--model nope --batch 4", "--serve", RUN + " --memory-format channels_last", '--model "open']
    served = subprocess.run([PYTHON, script, "--serve"], input="\n".join(requests) + "\n", capture_output=True,
                            text=True, timeout=120)
    answers = json_lines(served.stdout)
    check(failures, served.returncode == 0 and len(answers) == 5, f"--serve answers each of 5 requests, exit 0 "
          f"(exit {served.returncode}, {len(answers)} answers)")
    if len(answers) == 5:
        check(failures, all("error" in answers[i] for i in (1, 2, 4)),
              "a bad request, --serve and unbalanced quotes are errors")
        check(failures, answers[0].get("step_ms", 0) > 0 and "start_s" in answers[0], "the first run is timed, "
              "with the imports' seconds")
        check(failures, answers[3].get("memory_format") == "channels_last" and "start_s" not in answers[3],
              "a later run keeps its own flags; only the first answer counts the imports")

    run = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                          "--warmup", "1", "--torch-channels-last", "--json", "--torch-script", script],
                         capture_output=True, text=True, timeout=120)
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

    # One process for every run (the GPU's default), here on the CPU: the imports counted once.
    one = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                          "--warmup", "1", "--rounds", "1", "--torch-channels-last", "--torch-processes", "one",
                          "--json", "--torch-script", script], capture_output=True, text=True, timeout=120)
    rows = json_lines(one.stdout)
    check(failures, one.returncode == 0 and len(rows) == 1, f"--torch-processes one: a row (exit {one.returncode})")
    if rows:
        r = rows[0]
        check(failures, (r.get("torch_channels_last") or {}).get("memory_format") == "channels_last"
              and "start_s" in (r.get("torch") or {}) and "start_s" not in (r.get("torch_channels_last") or {}),
              "--torch-processes one: the second run answered by the first run's process, as asked")

    # A helper that answers with another run than asked (a stray JSON line): no such answer is taken.
    with tempfile.NamedTemporaryFile("w", suffix=".py") as fake:
        fake.write("import json, sys\n"
                   "for line in sys.stdin:\n"
                   "    print(json.dumps({'model': 'vgg11_cifar', 'batch': 8, 'precision': 'fp32',"
                   " 'memory_format': 'contiguous', 'step_ms': 1.0}), flush=True)\n")
        fake.flush()
        stray = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                                "--warmup", "0", "--rounds", "1", "--torch-processes", "one", "--json",
                                "--torch-script", fake.name], capture_output=True, text=True, timeout=120)
    rows = json_lines(stray.stdout)
    check(failures, stray.returncode == 0 and len(rows) == 1 and rows[0]["torch"] is None
          and "with another run" in stray.stderr, f"an answer for another run is refused (exit {stray.returncode})")

    broken = subprocess.run([train_step, "--models", "small_cnn", "--batches", "8", "--threads", "1", "--steps", "1",
                             "--warmup", "0", "--json", "--python", "/bin/false", "--torch-script", script],
                            capture_output=True, text=True, timeout=120)
    rows = json_lines(broken.stdout)
    check(failures, broken.returncode == 0 and len(rows) == 1 and rows[0]["torch"] is None
          and "ended (status 1)" in broken.stderr,
          f"a Python that fails: empty PyTorch columns and why (exit {broken.returncode}; {broken.stderr.strip()[:200]})")

    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
