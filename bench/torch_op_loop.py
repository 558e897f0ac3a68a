"""A tight loop of one PyTorch operator (torch.mm on 2x2 tensors), for bench/torch_op_cost.sh and
bench/stack_walk_cost.sh. Usage: torch_op_loop.py N [DEPTH]: the loop runs DEPTH Python frames
below the module's (default 0), each with a few locals, as a model's forward does. Prints
'ns_per_call=X' for the timed loop (after a warm-up)."""
import sys
import time

import torch
from nest import at_depth

torch.set_num_threads(1)
n = int(sys.argv[1])
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 0
a = torch.ones(2, 2)


def loop():
    for _ in range(1000):
        torch.mm(a, a)
    t0 = time.perf_counter()
    for _ in range(n):
        torch.mm(a, a)
    return time.perf_counter() - t0


elapsed = at_depth(depth, loop) if depth > 0 else loop()
print(f"ns_per_call={elapsed / n * 1e9:.0f}")
