"""Matrix products on one thread, ~1.5 ms each, whose CPU stops for 80 ms three times (cpu_stall
stops the CPU under this thread while it runs them), as a vCPU its hypervisor did not run.
Usage: stalled_ops.py STEPS CPU_STALL_TOOL; prints each stop's start and end (ns) as the tool
does, after the steps (and as many more as it takes for every stop to come)."""
import os
import subprocess
import sys

import torch

steps, tool = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)
a = torch.randn(384, 384)
stops = {steps * 55 // 100, steps * 70 // 100, steps * 85 // 100}  # (detect trains on the first half)
tools = []
for i in range(steps):
    if i in stops:
        tools.append(subprocess.Popen([tool, "1", "80", str(os.getpid())], stdout=subprocess.PIPE,
                                      text=True))
    torch.mm(a, a)
while any(t.poll() is None for t in tools):  # (a stop comes after 2 ms more of this thread's CPU)
    torch.mm(a, a)
for t in tools:
    out, _ = t.communicate()
    if t.returncode != 0:
        sys.exit(f"stalled_ops: {tool} failed ({t.returncode})")
    print(out, end="")
