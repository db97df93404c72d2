"""No leaks and no reference cycles across 10^5 small calls: ops with autograd, a Module
subclass's forward and backward, NumPy and DLPack round trips. Tensor memory returns to
where it started (ringflow's allocator counts it), Python's heap does not grow, and the
calls leave nothing for the cycle collector."""
import gc
import tracemalloc

import numpy as np
import pytest

import ringflow as rf
from ringflow import nn

CALLS = 100_000


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).relu()


def small_calls(n, net, x, a):
    """n small calls of each kind; the last results are dropped on return."""
    for _ in range(n // 4):
        y = (x + x) * 2.0
        y.sum().backward()
        net(x).mean().backward()
        b = rf.from_numpy(a).numpy()
        t = rf.from_dlpack(rf.as_tensor(b))
        del y, b, t


def test_small_calls_leave_nothing_behind():
    net = Tiny()
    x = rf.ones(2, 4, requires_grad=True)
    a = np.ones(8, dtype=np.float32)
    small_calls(1000, net, x, a)  # warm-up: allocator caches, interned strings
    x.grad = None
    net.zero_grad()
    gc.collect()
    gc.disable()
    try:
        tensors_before = rf.memory_allocated()
        tracemalloc.start()
        heap_before = tracemalloc.get_traced_memory()[0]
        small_calls(CALLS, net, x, a)
        heap_growth = tracemalloc.get_traced_memory()[0] - heap_before
        tracemalloc.stop()
        x.grad = None
        net.zero_grad()
        cycles = gc.collect()
    finally:
        gc.enable()
    assert cycles == 0, f"{cycles} objects were only reachable through reference cycles"
    assert heap_growth < 64 * 1024, f"Python's heap grew by {heap_growth} bytes over {CALLS} calls"
    assert rf.memory_allocated() == tensors_before


def test_modules_are_freed():
    import weakref

    net = Tiny()
    alive = weakref.ref(net)
    net(rf.ones(1, 4)).sum().backward()
    del net
    assert alive() is None  # freed by reference counting alone, no cycle
