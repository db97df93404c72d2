#!/usr/bin/python3
"""step_memory.py: bench/step_memory.cpp's training step in PyTorch, measured the same way.

The step: a VGG-11-like CIFAR-10 front on random data (seeded): conv3x3 3->64 @32x32, relu,
maxpool2; conv3x3 64->128 @16x16, relu, maxpool2; conv3x3 128->256 @8x8, relu, maxpool2;
flatten; linear 4096->10; cross_entropy; backward; in-place SGD under no_grad (grads set to
None). Plain tensors and torch.nn.functional (NCHW, PyTorch's default layout); the input
batch and labels are made once, before the loop.

Per step after --warmup steps: median wall ms (min in brackets) and minor page faults
(getrusage(RUSAGE_SELF).ru_minflt delta / steps). PyTorch's CPU allocator is
posix_memalign/free: glibc serves blocks over its mmap threshold (at most 32 MiB) with mmap
and unmaps them on free, so the 64 MiB activations of batch 256 are faulted in afresh every
step. Run it once as is and once with glibc's mmap turned off and trimming disabled, so
that freed blocks stay in the heap (the line names the malloc environment it ran under):

  /usr/bin/python3 bench/step_memory.py
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 /usr/bin/python3 bench/step_memory.py

Debian's PyTorch lives in /usr/bin/python3 only.
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def param(shape, fan_in, gen):  # PyTorch's default conv/linear init
    bound = 1.0 / fan_in ** 0.5
    return (torch.rand(shape, generator=gen) * 2 * bound - bound).requires_grad_()


def make_net(gen):
    ch = [3, 64, 128, 256]
    p = []
    for i in range(3):
        p.append(param((ch[i + 1], ch[i], 3, 3), ch[i] * 9, gen))
        p.append(param((ch[i + 1],), ch[i] * 9, gen))
    p.append(param((10, 256 * 4 * 4), 256 * 4 * 4, gen))
    p.append(param((10,), 256 * 4 * 4, gen))
    return p


def step(p, x, y, lr):
    h = x
    for i in range(3):
        h = F.max_pool2d(F.relu(F.conv2d(h, p[2 * i], p[2 * i + 1], padding=1)), 2)
    loss = F.cross_entropy(F.linear(torch.flatten(h, 1), p[6], p[7]), y)
    loss.backward()
    with torch.no_grad():
        for w in p:
            w.add_(w.grad, alpha=-lr)
            w.grad = None
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(args.seed)
    p = make_net(gen)
    x = torch.randn((args.batch, 3, 32, 32), generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)

    for _ in range(args.warmup):
        loss = step(p, x, y, 0.01)
    f0 = minor_faults()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step(p, x, y, 0.01)
        ms.append(1e3 * (time.perf_counter() - t0))
    faults = (minor_faults() - f0) / args.steps

    env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_"))
    if args.json:
        print(json.dumps({"framework": "torch " + torch.__version__, "malloc_env": env,
                          "batch": args.batch, "threads": torch.get_num_threads(),
                          "steps": args.steps, "ms_per_step": statistics.median(ms),
                          "min_ms": min(ms), "faults_per_step": faults, "loss": loss}))
    else:
        print(f"torch {torch.__version__} malloc={env or 'default'} batch={args.batch} "
              f"threads={torch.get_num_threads()}: {statistics.median(ms):8.1f} ms/step "
              f"(min {min(ms):.1f}), {faults:8.0f} faults/step, loss {loss:.4f}")


if __name__ == "__main__":
    main()
