"""A healthy but irregular two-rank training job for bench/agent_false_alarms.sh: what a real job
does besides its steady steps, none of which is a fault. Run through
tests/e2e/workloads/launch_ranks.py 2 irregular_job.py SECONDS CHECKPOINT_DIR [PAUSE_S] (PAUSE_S:
a sleep after each step, for a light job beside another).

Each step: a small MLP's forward and backward on a random batch, an all_reduce of the
gradients (Gloo), an SGD step. Besides:
  - every 300 steps rank 0 writes a checkpoint (torch.save of the model and optimizer, about
    4 MB, then fsync), as jobs do; the other rank waits for it in the next all_reduce;
  - every 500 steps both ranks run an evaluation pass (20 batches under no_grad);
  - in 0.5% of the steps the data loader is slow on both ranks at once (5-20 ms: the same
    seeded choice on each rank, so no rank straggles);
Rank 0 prints steps=N seconds=S at the end."""
import os
import random
import sys
import time

import torch
import torch.distributed as dist


def main():
    seconds, ckpt_dir = float(sys.argv[1]), sys.argv[2]
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    # ~4 MB of checkpoint: the model and a buffer of the size of a small embedding table
    table = torch.zeros(1024, 1024)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = random.Random(11)  # the same on both ranks: hiccups on the same steps
    data = torch.Generator().manual_seed(rank)
    start = time.monotonic()
    step = 0
    while True:
        if step % 100 == 0:  # the ranks stop at the same step: rank 0's clock decides
            done = torch.tensor([int(rank == 0 and time.monotonic() - start >= seconds)])
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
            if done.item():
                break
        if loader.random() < 0.005:
            time.sleep(loader.uniform(0.005, 0.020))
        x = torch.randn(32, 64, generator=data)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= 2
        opt.step()
        step += 1
        if pause:
            time.sleep(pause)
        if step % 300 == 0 and rank == 0:
            path = os.path.join(ckpt_dir, "checkpoint.pt")
            with open(path + ".tmp", "wb") as f:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "table": table}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        if step % 500 == 0:
            with torch.no_grad():
                for _ in range(20):
                    x = torch.randn(32, 64, generator=data)
                    (model(x) - x).pow(2).mean()
    if rank == 0:
        print(f"steps={step} seconds={time.monotonic() - start:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
