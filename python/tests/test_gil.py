"""Long calls release the GIL: another Python thread runs while one is inside a kernel or is
loading data (collectives: ddp_worker.py, under mpiexec).

With a switch interval far longer than the test, Python hands the GIL from a running thread
to a waiting one only when the running one releases it. A worker thread repeats the call
until told to stop (or 10^4 times); the main thread naps briefly and then looks at the worker:
if the call held the GIL, the main thread could not run again until the worker had left its
loop."""
import sys
import threading
import time

import ringflow as rf


def main_thread_runs_during(call):
    events, stop = [], threading.Event()

    def worker():
        events.append("entered")
        for _ in range(10_000):
            if stop.is_set():
                break
            call()
        events.append("left")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    t = threading.Thread(target=worker)
    try:
        t.start()
        while not events:
            time.sleep(0.001)  # the worker takes the GIL and enters its loop
        time.sleep(0.01)
        observed = list(events)
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        t.join()
    return observed == ["entered"]


def test_kernels_release_the_gil():
    a = rf.randn(256, 256)
    assert main_thread_runs_during(lambda: rf.matmul(a, a)), \
        "the main thread could not run while the worker was in a kernel"


def test_data_loading_releases_the_gil():
    images = rf.data.SyntheticDataset(size=64, image_shape=[3, 32, 32])
    loader = rf.data.DataLoader(images, batch_size=16, shuffle=True,
                                transforms=[rf.data.transforms.RandomHorizontalFlip()])

    def batches():
        while True:
            yield from loader

    it = batches()
    assert main_thread_runs_during(lambda: next(it)), \
        "the main thread could not run while the worker was taking a batch"
