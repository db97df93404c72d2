#!/usr/bin/env python3
"""apps/train's checkpoint places and resumes as a user meets them (issues 31 and 33): places
that cannot hold a checkpoint refused before the first step, stale temporary files of an
interrupted write removed with a log line, a --checkpoint-dir of another run refused, a
finished run resumed exiting 0 with a word, a checkpoint of another model named as such, and
a mid-epoch checkpoint refused where the epochs would not line up. Every file is made here.

usage: train_checkpoint_test.py TRAIN"""
import json
import os
import struct
import subprocess
import sys
import tempfile

train = sys.argv[1]
failures = []
QUICK = ["--threads", "1", "--log-every", "2", "--eval-every", "0"]


def check(ok, what, out=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        print(out[-1500:])


def run(*args, model="mlp", iterations=4):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_", "SLURM_", "HYDRA_"))
           and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    p = subprocess.run([train, "--model", model, "--max-iters", str(iterations), *QUICK, *args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def edit_metadata(src, dst, edit):
    """A copy of checkpoint src with its header's metadata edited (the data, and so its CRC,
    unchanged), as a hand-edited or foreign file would be."""
    with open(src, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    edit(header["__metadata__"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + length:])


def refused(args, message, what, iterations=4):
    code, out = run(*args, iterations=iterations)
    trained = "Iteration [" in out
    check(code == 1 and message in out and not trained,
          f"{what}: refused before the first step, saying '{message}'", out)


with tempfile.TemporaryDirectory() as tmp:
    # Places that cannot hold a checkpoint.
    os.mkdir(f"{tmp}/folder")
    refused(["--checkpoint", f"{tmp}/folder"], f"--checkpoint {tmp}/folder: is a folder",
            "--checkpoint naming a folder")
    check(not os.path.exists(f"{tmp}/folder.tmp"), "--checkpoint naming a folder: no .tmp left")
    refused(["--checkpoint", f"{tmp}/no/such/c.safetensors"],
            f"the folder {tmp}/no/such does not exist", "--checkpoint in a missing folder")
    refused(["--checkpoint", "/proc/c.safetensors"], "--checkpoint /proc/c.safetensors: cannot write in /proc",
            "--checkpoint where nothing can be written")
    with open(f"{tmp}/file", "w") as f:
        f.write("x")
    refused(["--checkpoint-dir", f"{tmp}/file"], f"--checkpoint-dir {tmp}/file: is a file, not a folder",
            "--checkpoint-dir naming a file")
    refused(["--checkpoint-dir", "/proc/ck"], "--checkpoint-dir /proc/ck: cannot make the folder",
            "--checkpoint-dir where no folder can be made")
    refused(["--checkpoint-every", "5"], "--checkpoint-every needs a place to write",
            "--checkpoint-every with nowhere to write")
    refused(["--resume", "auto"], "--resume auto resumes the newest checkpoint of --checkpoint-dir",
            "--resume auto with nowhere to look")
    refused(["--sync", "fedavg", "--checkpoint-dir", f"{tmp}/fed", "--checkpoint-every", "2"],
            "--checkpoint-every does not go with --sync fedavg", "--checkpoint-every under fedavg")

    # Temporary files that an interrupted write left: removed at start, with a line each.
    ckpt, ckdir = f"{tmp}/c.safetensors", f"{tmp}/ck"
    os.mkdir(ckdir)
    stale = [ckpt + ".tmp", f"{ckdir}/checkpoint-000000003.safetensors.tmp"]
    for path in stale:
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)
    other = f"{ckdir}/notes.tmp"  # not a checkpoint's: left alone
    open(other, "w").close()
    code, out = run("--epochs", "1", "--checkpoint", ckpt, "--checkpoint-dir", ckdir,
                    "--checkpoint-every", "3")
    check(code == 0, f"a run beside stale temporary files exits 0: {code}", out)
    for path in stale:
        check(f"removed {path} (1000 bytes), left by an interrupted checkpoint write" in out
              and not os.path.exists(path), f"{os.path.basename(path)} removed with a log line", out)
    check(os.path.exists(other), "a .tmp that is not a checkpoint's is left alone")
    check(sorted(os.listdir(ckdir)) == ["checkpoint-000000003.safetensors",
                                        "checkpoint-000000004.safetensors", "notes.tmp"],
          f"--checkpoint-every 3: one at iteration 3, one at the epoch's end: {os.listdir(ckdir)}")

    # A folder holding another run's checkpoints is not mixed with a new run's.
    refused(["--epochs", "2", "--checkpoint-dir", ckdir], "holds checkpoints of an earlier run",
            "a fresh run into a used --checkpoint-dir")
    refused(["--epochs", "2", "--checkpoint-dir", ckdir, "--resume", f"{ckdir}/checkpoint-000000003.safetensors"],
            "past the resumed checkpoint's iteration 3", "resuming an older checkpoint into its folder")

    # A mid-epoch checkpoint resumes only where the epochs line up.
    refused(["--epochs", "2", "--resume", f"{ckdir}/checkpoint-000000003.safetensors"],
            "was written in the middle of epoch 1 (after its iteration 3 of 4) by 1 ranks; it "
            "resumes with as many ranks and iterations an epoch", "a mid-epoch checkpoint with "
            "another epoch length", iterations=5)

    # A finished run, restarted: a word and exit 0.
    code, out = run("--epochs", "2", "--resume", ckpt, "--checkpoint", ckpt)
    check(code == 0 and "Resumed from" in out, f"resuming after epoch 1 of 2 trains on: {code}", out)
    code, out = run("--epochs", "1", "--resume", ckpt)
    check(code == 0 and "nothing left to train: the checkpoint is at epoch 2 of 1" in out
          and "Iteration [" not in out, f"a finished run resumed says so and exits 0: {code}", out)
    code, out = run("--epochs", "1", "--resume", "auto", "--checkpoint-dir", ckdir)
    check(code == 0 and "resuming " + f"{ckdir}/checkpoint-000000004.safetensors" in out
          and "nothing left to train: the checkpoint is at epoch 1 of 1" in out,
          f"--resume auto of a finished run: the newest, nothing left: {code}", out)

    # Numbers out of range are named with file and key, not met later; a file without its
    # checksum loads with a warning.
    edited = f"{tmp}/edited.safetensors"
    for epoch in ("9223372036854775808", "18446744073709551615"):
        edit_metadata(ckpt, edited, lambda m: m.update(epoch=epoch))
        refused(["--epochs", "3", "--resume", edited],
                f"checkpoint '{edited}': metadata 'epoch' = '{epoch}' is out of range",
                f"an epoch of {epoch}")
    edit_metadata(ckpt, edited, lambda m: m.pop("ringflow.data_crc32"))
    code, out = run("--epochs", "3", "--resume", edited)
    check(code == 0 and f"train: warning: checkpoint '{edited}' has no integrity checksum" in out,
          f"a checkpoint without its checksum resumes with a warning: {code}", out)

    # Another model's checkpoint is named as such, with no tensor list.
    code, out = run("--epochs", "3", "--resume", ckpt, model="small_cnn")
    check(code == 1 and "the checkpoint is of model 'mlp', not 'small_cnn'" in out
          and "load_state_dict" not in out, f"another model's checkpoint: {code}", out)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
