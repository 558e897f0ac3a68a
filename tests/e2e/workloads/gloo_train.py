"""Two-rank torch.distributed (Gloo, CPU, loopback) job with a known set of collectives, then a
few steps of DistributedDataParallel training. Run with torchrun, or with
launch_ranks.py 2 gloo_train.py STEPS (Debian's torchrun is broken under Python 3.11).

Per rank: 3 all_reduce of float32[1000], 2 broadcast of int64[10] from rank 0, 1 all_gather of
float64[16], 1 barrier, rank 0 sends float32[256] to rank 1 (which receives it), one
all_reduce that waits 0.2 s for the slower rank 1, then STEPS DDP steps."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for _ in range(3):
        dist.all_reduce(torch.ones(1000))
    for _ in range(2):
        dist.broadcast(torch.arange(10), src=0)
    out = [torch.empty(16, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(out, torch.full((16,), float(rank), dtype=torch.float64))
    dist.barrier()
    if rank == 0:
        dist.send(torch.ones(256), dst=1)
    else:
        buf = torch.empty(256)
        dist.recv(buf, src=0)
    # a straggler: rank 1 arrives 0.2 s late, so rank 0's all_reduce completes 0.2 s after it
    # was called, although its call returns at once
    if rank == 1:
        time.sleep(0.2)
    dist.all_reduce(torch.ones(4))

    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
