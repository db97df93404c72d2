"""One rank of test_distributed.py's run (mpiexec -n 2, or torchrun): collectives on the default
group, DistributedDataParallel over a Module subclass written in Python checked against one
process training on the whole batch, a collective that lets another thread run while it
waits, and a destroyed group refusing collectives. On any difference or error, prints it
naming this rank and ends the process at once with status 1 (end_rank): a rank that exited
normally would wait at exit in MPI_Finalize for the other rank, itself waiting in a
collective for this one, until the test's timeout.

usage: ddp_worker.py SCRATCH_DIR [--fail-on-rank R]
  SCRATCH_DIR     a folder both ranks see, for the GIL check's signal
  --fail-on-rank  rank R fails on purpose after joining the group (the other then waits in
                  all_reduce): for the test that a failing rank ends the run"""
import os
import sys
import threading
import time
import traceback

import numpy as np

import ringflow as rf
from ringflow import distributed as dist
from ringflow import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


RANK = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "-1")))  # for messages, group or not


class Failed(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failed(what)


def end_rank(error):
    """This rank's error on stderr, then an exit without Python's or MPI's clean-up, which
    mpiexec (and torchrun) see as a failed rank: they stop the other ranks at once."""
    if isinstance(error, Failed):
        print(f"rank {RANK}: {error}", file=sys.stderr)
    else:
        print(f"rank {RANK}: {type(error).__name__}: {error}", file=sys.stderr)
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def collectives(rank, world):
    t = rf.full((5,), float(rank + 1))
    dist.all_reduce(t)
    check(t.tolist() == [world * (world + 1) / 2] * 5, f"all_reduce gave {t.tolist()}")
    t = rf.full((3,), float(rank))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check(t.tolist() == [world - 1.0] * 3, f"all_reduce MAX gave {t.tolist()}")
    b = rf.arange(4).float() * (rank + 1)
    work = dist.broadcast(b, src=1, async_op=True)
    work.wait()
    check(b.tolist() == [0.0, 2.0, 4.0, 6.0] and work.is_completed(), f"broadcast gave {b.tolist()}")
    gathered = rf.zeros(2 * world)
    dist.all_gather_into_tensor(gathered, rf.full((2,), float(rank)))
    check(gathered.tolist() == [float(r) for r in range(world) for _ in range(2)], f"all_gather gave {gathered.tolist()}")
    dist.barrier()


def ddp_matches_one_process(rank, world):
    rng = np.random.default_rng(0)  # every rank draws the same whole batch
    x = rng.normal(size=(8 * world, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=8 * world)
    rf.manual_seed(rank)  # different starting points: DDP must broadcast rank 0's
    model = Net()
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=0)  # a bucket per parameter
    rf.manual_seed(0)
    reference = Net()  # rank 0's starting point, trained alone on the whole batch
    opt = rf.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ref_opt = rf.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    share = slice(8 * rank, 8 * (rank + 1))
    for step in range(3):
        with ddp.no_sync():  # accumulate half the share's gradient locally, then synchronise
            rf.nn.functional.cross_entropy(ddp(rf.from_numpy(x[share][:4])), rf.from_numpy(y[share][:4])).backward()
        rf.nn.functional.cross_entropy(ddp(rf.from_numpy(x[share][4:])), rf.from_numpy(y[share][4:])).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        loss = sum(rf.nn.functional.cross_entropy(reference(rf.from_numpy(x[r * 8 + h:r * 8 + h + 4])),
                                                  rf.from_numpy(y[r * 8 + h:r * 8 + h + 4]))
                   for r in range(world) for h in (0, 4)) / world
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        check(np.allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6),
              f"{name} differs from one process's training")
    check(ddp.module is model and len(ddp.bucket_parameter_names()) == 4, "ddp.module or buckets")


def collective_releases_the_gil(rank, scratch):
    """Rank 0 waits inside all_reduce for rank 1, which comes only once rank 0's other thread
    has run during that wait and said so in a file. With a switch interval far longer than the
    test, that thread can run only if all_reduce released the GIL; if it did not, rank 1 comes
    after 60 s anyway and rank 0 reports the failure."""
    signal = os.path.join(scratch, "rank0-thread-ran")
    if rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(signal) and time.monotonic() < deadline:
            time.sleep(0.01)
        dist.all_reduce(rf.ones(1))
        return
    inside = threading.Event()

    def other_thread():
        while not inside.is_set():
            time.sleep(0.001)
        with open(signal, "w") as f:  # runs only while the main thread is in all_reduce
            f.write("ran")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    thread = threading.Thread(target=other_thread)
    try:
        thread.start()
        inside.set()
        dist.all_reduce(rf.ones(1))
        ran = os.path.exists(signal)
    finally:
        inside.set()
        sys.setswitchinterval(interval)
        thread.join()
    check(ran, "another thread could not run while all_reduce waited (the GIL was held)")


def expect_error(fn, words, what):
    try:
        fn()
    except RuntimeError as e:
        check(words in str(e), f"{what}: the message '{e}' lacks '{words}'")
        return
    check(False, f"{what}: no error")


def destroyed_group_refuses(rank):
    """After destroy_process_group, the default group's functions, a group kept from before and
    a DistributedDataParallel made before raise, naming what to do."""
    model = Net()
    ddp = dist.DistributedDataParallel(model)
    group = dist.group()
    dist.barrier()
    dist.destroy_process_group()
    t = rf.ones(2)
    expect_error(lambda: dist.all_reduce(t), "init_process_group", "all_reduce after destroy")
    expect_error(lambda: dist.get_rank(), "init_process_group", "get_rank after destroy")
    expect_error(lambda: dist.broadcast(t, group=group), "was destroyed", "broadcast on a kept group")
    expect_error(lambda: ddp(rf.ones(2, 6)), "was destroyed", "a DistributedDataParallel of the group")
    expect_error(lambda: dist.DistributedDataParallel(model, process_group=group), "was destroyed",
                 "a new DistributedDataParallel on the group")
    check(t.tolist() == [1.0, 1.0] and not dist.is_initialized(), "the refused calls changed something")


def main():
    scratch, options = sys.argv[1], sys.argv[2:]
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    if options[:1] == ["--fail-on-rank"]:
        check(rank != int(options[1]), "failing on purpose (--fail-on-rank)")
    collectives(rank, world)
    ddp_matches_one_process(rank, world)
    collective_releases_the_gil(rank, scratch)
    destroyed_group_refuses(rank)
    print(f"rank {rank} of {world}: ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        end_rank(e)
