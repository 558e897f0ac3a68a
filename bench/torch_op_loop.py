"""A tight loop of one PyTorch operator (torch.mm on 2x2 tensors), for bench/torch_op_cost.sh.
Usage: torch_op_loop.py N. Prints 'ns_per_call=X' for the timed loop (after a warm-up)."""
import sys
import time

import torch

torch.set_num_threads(1)
n = int(sys.argv[1])
a = torch.ones(2, 2)
for _ in range(1000):
    torch.mm(a, a)
t0 = time.perf_counter()
for _ in range(n):
    torch.mm(a, a)
print(f"ns_per_call={(time.perf_counter() - t0) / n * 1e9:.0f}")
