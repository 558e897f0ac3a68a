"""Steps per second of the tiny GPT training loop (tests/e2e/workloads/tiny_gpt.py), optionally
under torch.profiler (with_stack=True) or cProfile, for bench/torch_overhead.sh.

Usage: train_steps.py STEPS [none|torch-profiler|cprofile] [small|medium|gpt]. Prints
'steps_per_s=X cpu_ms_per_step=Y' (Y: the training thread's own CPU time, which includes what
uprobes cost it and excludes time spent waiting for a CPU). small is the tests' model (about 1 ms per step here: the worst case for a
per-call tracer); medium has width 256, context 64, batch 8 (tens of ms per step); gpt is issue 32's
shape (3 blocks, width 128, context 64, batch 5: ~127 traced operators, ~21 ms per step)."""
import cProfile
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "e2e", "workloads"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tiny_gpt  # noqa: E402


def main():
    steps = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "none"
    size = sys.argv[3] if len(sys.argv) > 3 else "small"
    if size == "medium":  # the model reads these module globals when it runs
        tiny_gpt.V, tiny_gpt.D, tiny_gpt.T, tiny_gpt.B = 512, 256, 64, 8
    elif size == "gpt":  # issue 32's shape: three blocks, ~20 ms of CPU per step
        tiny_gpt.V, tiny_gpt.D, tiny_gpt.T, tiny_gpt.B, tiny_gpt.L = 512, 128, 64, 5, 3
    elif size != "small":
        sys.exit(f"unknown size {size}")
    V, B, T = tiny_gpt.V, tiny_gpt.B, tiny_gpt.T
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = tiny_gpt.TinyGPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        idx = torch.randint(0, V, (B, T))
        loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(20):  # warm-up: allocator, first-call initialisation
        step()
    print("warm", flush=True)  # for bench/probe_accounting.sh: the steady state starts here
    if mode == "torch-profiler":
        from torch.profiler import profile, ProfilerActivity
        ctx = profile(activities=[ProfilerActivity.CPU], with_stack=True)
    elif mode == "cprofile":
        ctx = cProfile.Profile()
    elif mode == "none":
        ctx = None
    else:
        sys.exit(f"unknown mode {mode}")
    if ctx is not None:
        ctx.__enter__()
    t0 = time.perf_counter()
    c0 = time.thread_time()  # this thread's CPU, user and system (where probes run): no waiting
    for _ in range(steps):
        step()
    cpu = time.thread_time() - c0
    elapsed = time.perf_counter() - t0
    if ctx is not None:
        ctx.__exit__(None, None, None)
    print(f"steps_per_s={steps / elapsed:.2f} cpu_ms_per_step={1e3 * cpu / steps:.4f}")


if __name__ == "__main__":
    main()
