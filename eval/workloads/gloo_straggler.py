"""A two-rank Gloo data-parallel loop with a straggling rank, for eval/run.

Usage (through tests/e2e/workloads/launch_ranks.py 2 ...): gloo_straggler.py STEPS TRUTH.json
[START_FRAC END_FRAC PROB DELAY_MS [STRAGGLER]]. Each step computes a little and all-reduces
64 KiB. During steps [START_FRAC, END_FRAC) x STEPS, rank STRAGGLER (default 1) arrives
DELAY_MS late with probability PROB (a slow or preempted rank), so the other ranks' all_reduce
waits for it. The straggler writes the delays (CLOCK_MONOTONIC ns) to TRUTH.json, layer
comm. With EVAL_SIGNAL=FRAC:PATH, rank 0 creates PATH when it reaches step FRAC x STEPS (so that
a fault injected from outside, eval/inject.py net-fault ... @PATH, lands at that point of the
job whatever the machine's speed). STEPS may be a duration such as 110s (eval/run --online): rank
0 says when it is up through the all_reduce itself, and the fractions are of that time."""
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist

truth_path = sys.argv[2]
seconds = float(sys.argv[1][:-1]) if sys.argv[1].endswith("s") else 0.0
steps = 0 if seconds else int(sys.argv[1])
start_frac, end_frac, prob, delay_ms = (float(a) for a in (sys.argv[3:7] or [0.6, 0.8, 0.2, 20]))
straggler = int(sys.argv[7]) if len(sys.argv) > 7 else 1
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
rng = random.Random(7)
grad = torch.ones(16384)
w = torch.randn(64, 64)
intervals = []
signal_frac, _, signal_path = os.environ.get("EVAL_SIGNAL", "").partition(":")
signal_at = float(signal_frac) if signal_path and rank == 0 else -1.0
signalled = False
t_start, step = time.monotonic(), 0
while True:
    progress = (time.monotonic() - t_start) / seconds if seconds else step / steps
    if not seconds and progress >= 1:
        break
    if not signalled and signal_at >= 0 and progress >= signal_at:
        open(signal_path, "w").close()
        signalled = True
    for _ in range(4):
        w = torch.tanh(w @ w.t() * 0.01)
    if rank == straggler and start_frac <= progress < end_frac and rng.random() < prob:
        t0 = time.monotonic_ns()
        time.sleep(delay_ms / 1000)
        intervals.append([t0, time.monotonic_ns()])
    # a timed job stops when rank 0's time is up: every rank learns it from the sum of element
    # 0 (the ranks must make the same number of calls)
    if seconds:
        grad[0] = 1.0 if rank == 0 and progress >= 1 else 0.0
    dist.all_reduce(grad)
    step += 1
    if seconds and grad[0] > 0:
        break
dist.destroy_process_group()
if rank == straggler:
    with open(truth_path, "w") as f:
        json.dump({"fault": "straggler", "layer": "comm", "intervals": intervals,
                   "rank": rank, "pid": os.getpid()}, f)
print(f"rank {rank} steps {step} delays {len(intervals)}")
