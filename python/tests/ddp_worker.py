"""One rank of test_distributed.py's run (mpiexec -n 2): collectives on the default group, and
DistributedDataParallel over a Module subclass written in Python checked against one process
training on the whole batch. Exits non-zero with a message on any difference."""
import sys

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


def check(ok, what):
    if not ok:
        print(f"rank {dist.get_rank()}: {what}", file=sys.stderr)
        sys.exit(1)


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


def main():
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    collectives(rank, world)
    ddp_matches_one_process(rank, world)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} of {world}: ok")


if __name__ == "__main__":
    main()
