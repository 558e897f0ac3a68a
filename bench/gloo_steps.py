"""Steps per second of a two-rank Gloo data-parallel loop (each step: a little compute, then an
all_reduce of 64 KiB), for bench/layers_auto_overhead.sh and bench/step_cost.sh. Run through
tests/e2e/workloads/launch_ranks.py 2 gloo_steps.py STEPS; rank 0 prints 'warm' after its
warm-up, then 'steps_per_s=X cpu_ms_per_step=Y' (Y: its training thread's own CPU time)."""
import sys
import time

import torch
import torch.distributed as dist


def main():
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    grad = torch.ones(16384)
    w = torch.randn(64, 64)

    def step():
        nonlocal w
        for _ in range(4):
            w = torch.tanh(w @ w.t() * 0.01)
        dist.all_reduce(grad)

    for _ in range(20):  # warm-up: connections, first-call initialisation
        step()
    if dist.get_rank() == 0:
        print("warm", flush=True)
    t0 = time.perf_counter()
    c0 = time.thread_time()
    for _ in range(steps):
        step()
    cpu = time.thread_time() - c0
    elapsed = time.perf_counter() - t0
    if dist.get_rank() == 0:
        print(f"steps_per_s={steps / elapsed:.2f} cpu_ms_per_step={1e3 * cpu / steps:.4f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
