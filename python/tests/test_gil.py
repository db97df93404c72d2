"""Long calls release the GIL: another Python thread runs while one is inside a kernel.

With a switch interval far longer than the test, Python hands the GIL from a running thread
to a waiting one only when the running one releases it. The main thread sleeps briefly and
then looks at the worker: if the kernel call held the GIL, the main thread could not run
again until the worker had finished it (and, with the long interval, the rest of its work)."""
import sys
import threading
import time

import ringflow as rf


def test_kernels_release_the_gil():
    a = rf.randn(1024, 1024)
    events = []

    def worker():
        events.append("entered")
        for _ in range(20):  # ~0.1 s per product or more: far beyond the main thread's nap
            rf.matmul(a, a)
        events.append("left")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        t = threading.Thread(target=worker)
        t.start()
        while not events:
            time.sleep(0.001)  # the worker takes the GIL and enters its loop
        time.sleep(0.01)
        observed = list(events)
    finally:
        sys.setswitchinterval(interval)
        t.join()
    assert observed == ["entered"], "the main thread could not run while the worker was in a kernel"
