"""A rank that ends by an uncaught exception while the other waits for it in all_reduce:
ringflow.distributed ends the whole job rather than letting this rank wait at exit (in
MPI_Finalize) for a rank that waits for it.

usage: raising_worker.py"""
import ringflow as rf
from ringflow import distributed as dist

dist.init_process_group()
if dist.get_rank() == 1:
    raise RuntimeError(f"rank {dist.get_rank()}: failing on purpose")
dist.all_reduce(rf.full((4,), 1.0))
print(f"rank {dist.get_rank()}: all_reduce returned")
