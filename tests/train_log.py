"""What the tests that start apps/train read from its output while it runs."""


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
