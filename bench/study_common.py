"""What the study scripts (bench/ddp, bench/federated) share: running a command with a
time limit, markdown tables and gnuplot plots. Standard library only."""
import os
import signal
import subprocess


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
