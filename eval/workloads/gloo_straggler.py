"""A two-rank Gloo data-parallel loop with a straggling rank, for eval/run.

Usage (through tests/e2e/workloads/launch_ranks.py 2 ...): gloo_straggler.py STEPS TRUTH.json
[START_FRAC END_FRAC PROB DELAY_MS [STRAGGLER]]. Each step computes a little and all-reduces
64 KiB. During steps [START_FRAC, END_FRAC) x STEPS, rank STRAGGLER (default 1) arrives
DELAY_MS late with probability PROB (a slow or preempted rank), so the other ranks' all_reduce
waits for it. The straggler writes the delays (CLOCK_MONOTONIC ns) to TRUTH.json, layer
comm. With EVAL_SIGNAL=FRAC:PATH, rank 0 creates PATH when it reaches step FRAC x STEPS (so that
a fault injected from outside, eval/inject.py net-fault ... @PATH, lands at that point of the
job whatever the machine's speed)."""
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist

steps, truth_path = int(sys.argv[1]), sys.argv[2]
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
signal_step = int(float(signal_frac) * steps) if signal_path and rank == 0 else -1
for step in range(steps):
    if step == signal_step:
        open(signal_path, "w").close()
    for _ in range(4):
        w = torch.tanh(w @ w.t() * 0.01)
    if rank == straggler and start_frac * steps <= step < end_frac * steps and rng.random() < prob:
        t0 = time.monotonic_ns()
        time.sleep(delay_ms / 1000)
        intervals.append([t0, time.monotonic_ns()])
    dist.all_reduce(grad)
dist.destroy_process_group()
if rank == straggler:
    with open(truth_path, "w") as f:
        json.dump({"fault": "straggler", "layer": "comm", "intervals": intervals,
                   "rank": rank, "pid": os.getpid()}, f)
print(f"rank {rank} steps {steps} delays {len(intervals)}")
