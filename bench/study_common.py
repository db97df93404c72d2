"""What the study scripts (bench/ddp, bench/federated, bench/scaling) share: running a
command with a time limit, reading apps/train's metrics, markdown tables and gnuplot plots.
Standard library only."""
import json
import os
import shutil
import signal
import statistics
import subprocess

PHASES = ["data", "forward", "backward", "comm", "optimizer"]  # the app's *_ms fields
PHASE_LABELS = ["data wait", "forward", "backward compute", "comm wait (exposed)", "optimizer"]


def default_mpiexec():
    """The launcher of the MPI that build/ links: RINGFLOW_MPIEXEC where set (meson's tests
    set the build's own), else MPICH's by its Debian name (-Dmpi=auto takes MPICH where it is
    installed), not the bare `mpiexec`, which Debian's alternatives may point at Open MPI."""
    return (os.environ.get("RINGFLOW_MPIEXEC") or shutil.which("mpiexec.mpich")
            or shutil.which("mpiexec.hydra") or "mpiexec")


def run_with_timeout(cmd, out, env, timeout):
    """The command's exit code, or "timeout". A run past its time gets SIGTERM first, as a
    process group, so that bench/cluster's traps tear its namespaces down and mpiexec takes
    its ranks with it; SIGKILL only if that does not end it."""
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        return "timeout"


def md_table(header, rows, left=1):
    """The first `left` columns left-aligned, the figures right-aligned."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def gnuplot(out, name, script, data):
    """Writes name.dat and name.gp into out/plot-data and draws out/name.png; script is
    (height in pixels, gnuplot commands). Returns the PNG's name, or None if gnuplot failed."""
    d = os.path.join(out, "plot-data")
    os.makedirs(d, exist_ok=True)
    for key, lines in data.items():
        with open(os.path.join(d, f"{name}{key}.dat"), "w") as f:
            f.write("\n".join(lines) + "\n")
    gp = os.path.join(d, name + ".gp")
    with open(gp, "w") as f:
        f.write(f"set terminal pngcairo size 1200,{script[0]} noenhanced font ',10'\n"
                f"set output '{os.path.abspath(os.path.join(out, name + '.png'))}'\n"
                f"cd '{os.path.abspath(d)}'\n" + script[1])
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"gnuplot failed on {gp}: {r.stderr.strip()}", flush=True)
        return None
    return name + ".png"


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


def read_iterations(path):
    if not os.path.exists(path):
        raise ValueError(f"no metrics file {path}")
    with open(path) as f:
        records = [json.loads(l) for l in f if l.strip()]
    its = [r for r in records if r.get("type") == "iteration"]
    if not its:
        raise ValueError(f"{path}: no iteration records")
    return sorted(its, key=lambda r: r["iteration"])


def summarize(its, warmup):
    """Note [how a figure is taken]: the mean of the iterations after the warm-up."""
    kept = its[warmup:]
    if not kept:
        raise ValueError(f"{len(its)} iterations, all of them warm-up")

    def mean(key):
        return statistics.fmean(r.get(key, 0.0) for r in kept)

    steps = [r["step_ms"] for r in kept]
    out = {"iterations": len(kept), "step_ms": mean("step_ms"),
           "step_ms_sd": statistics.stdev(steps) if len(steps) > 1 else 0.0,
           "max_step_ms": statistics.fmean(r.get("max_step_ms", r["step_ms"]) for r in kept),
           "images_per_s": mean("images_per_s")}
    for p in PHASES:
        out[p + "_ms"] = mean(p + "_ms")
    for key in ("comm_total_ms", "comm_cpu_ms", "softirq_ms", "bytes_sent", "bytes_received", "overlap",
                "max_bytes_sent", "max_bytes_received"):
        out[key] = mean(key)
    return out
