#!/usr/bin/env python3
"""Trains a small CNN on Fashion-MNIST with ringflow from Python, alone or data-parallel.

    ./dev python examples/python/train.py --epochs 2
    mpiexec -n 2 /usr/bin/python3 examples/python/train.py    (PYTHONPATH=build/python)

The network is a Module subclass written here; its layers are made in the order the C++
SmallCnn makes them, so with the same seed and flags this prints the losses that
`build/apps/train` (`--sync ddp` under a launcher) prints, bit for bit: the loop below is
that app's, step for step. Under mpiexec or torchrun (more than one rank) it joins the
process group and trains through DistributedDataParallel, each rank on its
DistributedSampler share, rank 0 alone printing and evaluating.
"""
import argparse
import json
import os
import sys

import ringflow as rf
from ringflow import nn
from ringflow.nn import functional as F


class SmallCnn(nn.Module):
    """conv(1->16) bn relu maxpool2, conv(16->32) bn relu maxpool2, linear(32*7*7 -> 10)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, num_classes)

    def forward(self, x):  # x: (N, 1, 28, 28)
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # (N, 16, 14, 14)
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)  # (N, 32, 7, 7)
        return self.fc(h.flatten(1))                           # (N, C)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--max-iters", type=int, default=0, help="iterations per epoch (0: all)")
    p.add_argument("--eval-every", type=int, default=1, help="epochs (0: never)")
    p.add_argument("--workers", type=int, default=1, help="data loading threads")
    p.add_argument("--threads", type=int, default=0, help="CPU kernel threads (0: the cores, shared by a host's ranks)")
    p.add_argument("--model", default="small_cnn",
                   help="small_cnn (the Module subclass above) or a name of ringflow.models.names()")
    p.add_argument("--data-dir", default=rf.data.FASHION_MNIST_DIR)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--metrics", default="", help="JSON lines: one record per logged iteration and epoch")
    return p.parse_args()


def launched_world():
    """The number of ranks the launcher started (mpiexec's PMI_SIZE, torchrun's WORLD_SIZE)."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"):
        if name in os.environ:
            return int(os.environ[name])
    return 1


def evaluate(model, loader):
    model.eval()
    loss, correct, total = 0.0, 0, 0
    with rf.no_grad():
        for images, labels in loader.epoch(0):
            logits = model(images)
            loss += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += int((logits.argmax(1) == labels).sum().item())
            total += labels.numel()
    model.train()
    return loss, correct, total


class Run:
    def __init__(self, args):
        self.args = args
        self.distributed = launched_world() > 1
        if self.distributed:
            rf.distributed.init_process_group()
        self.rank = rf.distributed.get_rank() if self.distributed else 0
        self.world = rf.distributed.get_world_size() if self.distributed else 1
        threads = args.threads
        if threads == 0 and self.distributed:  # the host's cores shared among its ranks
            threads = max(1, os.cpu_count() // rf.distributed.get_local_world_size())
        if threads > 0:
            rf.set_num_threads(threads)
        rf.manual_seed(args.seed)
        self.model = SmallCnn() if args.model == "small_cnn" else rf.models.make(args.model)
        self.make_data()
        self.optimizer = rf.optim.SGD(self.model.parameters(), lr=args.lr, momentum=args.momentum,
                                      weight_decay=args.weight_decay)
        self.scheduler = rf.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=max(1, args.epochs))
        # Collective: checks the ranks' models and broadcasts rank 0's state.
        self.net = (rf.distributed.DistributedDataParallel(self.model, bucket_cap_mb=args.bucket_cap_mb)
                    if self.distributed else self.model)
        self.metrics = open(args.metrics, "w") if args.metrics and self.rank == 0 else None
        self.iteration = 0

    def make_data(self):
        a = self.args
        train = rf.data.FashionMNIST(a.data_dir, train=True)
        test = rf.data.FashionMNIST(a.data_dir, train=False)
        normalize = [rf.data.transforms.Normalize([0.2860], [0.3530])]
        sampler = (rf.data.DistributedSampler(train, shuffle=True, seed=a.seed)
                   if self.distributed else None)
        self.train_loader = rf.data.DataLoader(train, batch_size=a.batch_size, shuffle=True, sampler=sampler,
                                               drop_last=True, seed=a.seed, num_workers=a.workers,
                                               transforms=normalize)
        self.test_loader = rf.data.DataLoader(test, batch_size=1000, num_workers=a.workers, transforms=normalize)
        self.steps = len(self.train_loader)
        if a.max_iters > 0:
            self.steps = min(self.steps, a.max_iters)
        if self.rank == 0:
            where = f" on {self.world} ranks ({rf.distributed.launch_description()})" if self.distributed else ""
            print(f"{a.model} on fashion-mnist: {len(train)} training and {len(test)} test images; "
                  f"{rf.get_num_threads()} threads{where}")

    def write(self, record):
        if self.metrics:
            self.metrics.write(json.dumps(record) + "\n")
            self.metrics.flush()

    def sum_over_ranks(self, values):
        """Each value summed over the ranks (one allreduce): the C++ app's figures across ranks."""
        if not self.distributed or not values:
            return values
        t = rf.tensor(values, dtype=rf.float64)
        rf.distributed.all_reduce(t)
        return t.tolist()

    def train_epoch(self, epoch):
        loss_sum, correct, seen, window, window_loss = 0.0, 0, 0, 0, 0.0
        logged = []
        batches = self.train_loader.epoch(epoch)
        for step in range(1, self.steps + 1):
            images, labels = next(batches)
            logits = self.net(images)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            value = loss.item()
            with rf.no_grad():
                step_correct = int((logits.argmax(1) == labels).sum().item())
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=not self.distributed)
            self.iteration += 1
            loss_sum, correct, seen = loss_sum + value, correct + step_correct, seen + labels.numel()
            window, window_loss = window + 1, window_loss + value
            if step % self.args.log_every == 0 or step == self.steps:
                if self.rank == 0:
                    print(f"Epoch [{epoch}], Iteration [{step}/{self.steps}], Loss: {window_loss / window:.4f}",
                          flush=True)
                logged.append((step, self.iteration, window_loss / window, step_correct / labels.numel()))
                window, window_loss = 0, 0.0
        sums = self.sum_over_ranks([v for _, _, loss, accuracy in logged for v in (loss, accuracy)])
        for k, (step, iteration, _, _) in enumerate(logged):  # the means over the ranks
            self.write({"type": "iteration", "epoch": epoch, "iteration": step, "global_iteration": iteration,
                        "loss": sums[2 * k] / self.world, "accuracy": sums[2 * k + 1] / self.world,
                        "lr": self.optimizer.lr})
        return self.sum_over_ranks([loss_sum, correct, seen])

    def run(self):
        for epoch in range(1, self.args.epochs + 1):
            loss_sum, correct, seen = self.train_epoch(epoch)
            record = {"type": "epoch", "epoch": epoch, "lr": self.optimizer.lr}
            self.scheduler.step()
            if self.rank != 0:
                continue
            print(f"Training set: Average loss: {loss_sum / max(1, self.steps * self.world):.4f}, "
                  f"Accuracy: {correct:.0f}/{seen:.0f} ({100.0 * correct / max(1, seen):.0f}%)")
            if self.args.eval_every > 0 and (epoch % self.args.eval_every == 0 or epoch == self.args.epochs):
                loss, right, total = evaluate(self.model, self.test_loader)
                print(f"Test set: Average loss: {loss / total:.4f}, Accuracy: {right}/{total} "
                      f"({100.0 * right / total:.0f}%)", flush=True)
                record.update(test_loss=loss / total, test_accuracy=right / total)
            self.write(record)


def main():
    try:
        Run(parse_args()).run()
    except (ValueError, RuntimeError) as e:  # ringflow's errors: the message says what and where
        print(f"train.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
