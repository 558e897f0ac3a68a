"""The GPT training step of bench/train_steps.py for SECONDS, each step's start, wall time and
the training thread's own CPU time written to OUT as JSON, for bench/agent_stalls.sh: a step's
wall time less its CPU time is how long the thread was held up (waiting for a CPU, or blocked).

Usage: step_stalls.py SECONDS OUT"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "e2e", "workloads"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tiny_gpt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: step_stalls.py SECONDS OUT")
    try:
        seconds, out = float(sys.argv[1]), sys.argv[2]
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        sys.exit(f"step_stalls: SECONDS must be a positive number of seconds, not {sys.argv[1]}")
    # issue 32's shape, as train_steps.py gpt
    tiny_gpt.V, tiny_gpt.D, tiny_gpt.T, tiny_gpt.B, tiny_gpt.L = 512, 128, 64, 5, 3
    V, B, T = tiny_gpt.V, tiny_gpt.B, tiny_gpt.T
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = tiny_gpt.TinyGPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        idx = torch.randint(0, V, (B, T))
        loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps.append((t0, time.monotonic_ns() - t0, time.thread_time_ns() - c0))
    with open(out, "w") as f:
        json.dump(steps, f)


if __name__ == "__main__":
    main()
