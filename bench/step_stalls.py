"""The GPT training step of bench/train_steps.py for SECONDS, each step's start
(CLOCK_MONOTONIC, the clock eacgm's records use), wall time and the training thread's own CPU
time written to OUT as JSON: for bench/agent_stalls.sh, a step's wall time less its CPU time is
how long the thread was held up (waiting for a CPU, or blocked); for bench/step_cost_ab.sh, the
CPU time of the steps in each phase it puts the training through.

WARMUP steps, when given, run first, untimed (first-call allocations and initialisation), then
'warm' is printed. SIGTERM ends the run early (OUT is written); SIGUSR1 turns cProfile on (every Python
call profiled, as `python -m cProfile` does), SIGUSR2 off.

Usage: step_stalls.py SECONDS OUT [WARMUP]"""
import cProfile
import json
import math
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "e2e", "workloads"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tiny_gpt  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: step_stalls.py SECONDS OUT [WARMUP]")
    try:
        seconds, out = float(sys.argv[1]), sys.argv[2]
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        sys.exit(f"step_stalls: SECONDS must be a positive number of seconds, not {sys.argv[1]}")
    warmup = sys.argv[3] if len(sys.argv) == 4 else "0"
    if not warmup.isdigit():
        sys.exit(f"step_stalls: WARMUP must be a whole number of steps, not {warmup}")
    # issue 32's shape, as train_steps.py gpt
    tiny_gpt.V, tiny_gpt.D, tiny_gpt.T, tiny_gpt.B, tiny_gpt.L = 512, 128, 64, 5, 3
    V, B, T = tiny_gpt.V, tiny_gpt.B, tiny_gpt.T
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = tiny_gpt.TinyGPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stop = []
    prof = cProfile.Profile()
    # the handlers run in this (the training) thread, between two bytecodes of a step
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
    signal.signal(signal.SIGUSR2, lambda *_: prof.disable())

    def step():
        idx = torch.randint(0, V, (B, T))
        loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(int(warmup)):
        step()
    if len(sys.argv) == 4:
        print("warm", flush=True)
    steps = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop:
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        step()
        steps.append((t0, time.monotonic_ns() - t0, time.thread_time_ns() - c0))
    prof.disable()
    with open(out, "w") as f:
        json.dump(steps, f)


if __name__ == "__main__":
    main()
