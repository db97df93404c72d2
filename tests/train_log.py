"""What the tests that start apps/train give it (a free port, an environment clean of any
launcher's variables) and read from it (its output while it runs, the losses it logged)."""
import json
import os
import random
import socket

# Every launcher's variables: mpiexec's (Hydra, Open MPI), Slurm's, torchrun's. Open MPI's
# settings (OMPI_MCA_*, OMPI_ALLOW_RUN_AS_ROOT*) stay, for the tests' mpirun.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_COMM_WORLD_", "SLURM_", "MPI_LOCAL", "HYDRA_",
                     "TORCHELASTIC_")
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "GROUP_RANK")


def free_port():
    """A port to listen on that nothing holds now, below the kernel's ephemeral range: a port
    from that range (bind to port 0) can be taken, before the run listens on it, as the local
    port of any socket that another test running alongside connects."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    rng = random.Random()  # seeded from the OS: parallel tests draw apart
    for _ in range(100):
        port = rng.randrange(10000, max(10001, first_ephemeral))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """This environment without any launcher's variables, one OpenMP thread, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(LAUNCHER_PREFIXES) and k not in LAUNCHER_VARS}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def losses(path):
    """Every iteration's loss from a --metrics file."""
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f
                if '"iteration"' in line and '"loss"' in line]


def until_training(proc, marker="Iteration [3/"):
    """Reads proc's output until `marker` (by default: training is under way on every rank)
    or its end. Returns the text read and the ranks' pid@host entries from train's start-up
    line `processes (pid@host) by rank: ...` ([] when there was none)."""
    seen, table = "", []
    while marker not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if "processes (pid@host) by rank: " in line:
            table = line.split("by rank: ")[1].split()
    return seen, table
