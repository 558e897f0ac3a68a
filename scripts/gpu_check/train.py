"""The GPU check's training job: a small GPT trained on one device, optionally data-parallel
through torch.distributed (world size 1 unless the launcher says otherwise), optionally under
torch.profiler, so that what eacgm records of it can be held against PyTorch's own account.

usage: train.py --device cuda|cpu [--seconds S | --steps N] [--dist nccl|gloo]
                [--profile OUT.json] [--result OUT.json]

--result writes {"steps", "seconds", "steps_per_s", "window_ns", "device", "torch", "cuda",
"nccl"}; window_ns: the timed steps' start and end on CLOCK_MONOTONIC, the GPU idle at both.
--profile runs the steps under torch.profiler and writes what it saw: kernels by name with
their counts, and the CUDA runtime calls by name (cudaLaunchKernel, cudaMemcpyAsync, ...);
--profile - profiles without writing (for its cost: walking 15 s of an H100's events in Python
takes longer than the run: it writes the result and leaves before the profiler's processing).
The loss is read after the profiler stops, so that its copy to the host is not a profiled step's.
--dist: one all_reduce of the gradients per step (MASTER_ADDR/PORT, RANK, WORLD_SIZE from the
environment; defaults: 127.0.0.1, a free port, 0, 1).
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, T, B, L = 256, 128, 64, 16, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        att = F.softmax(q @ k.transpose(-2, -1) / D**0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList([Block() for _ in range(L)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], required=True)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--dist", choices=["nccl", "gloo"], default="")
    p.add_argument("--profile", default="")
    p.add_argument("--result", default="")
    a = p.parse_args()
    if (a.seconds > 0) == (a.steps > 0):
        p.error("give one of --seconds (> 0) or --steps (> 0)")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    a = parse()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    if a.device == "cpu":
        torch.set_num_threads(1)
    dist = None
    if a.dist:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        if a.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(a.dist)
    model = TinyGPT().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    allreduces = 0

    def step():
        made = 0
        idx = torch.randint(0, V, (B, T), device=dev)
        loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        if dist is not None:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                made += 1
        opt.step()
        return loss, made

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    allreduces += step()[1]  # warm-up: first-call costs (allocator, cuBLAS, NCCL communicator)
    sync()
    prof = None
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
        prof = profile(activities=acts)
        prof.__enter__()
    # the timed steps on CLOCK_MONOTONIC (eacgm's clock), from after the warm-up's last kernel
    # to after the last step's: the GPU check counts the kernels that ran between the two
    window_start = time.monotonic_ns()
    steps, start = 0, time.monotonic()
    while True:
        loss, n = step()
        allreduces += n
        steps += 1
        if a.steps and steps >= a.steps:
            break
        if a.seconds and time.monotonic() - start >= a.seconds:
            break
    sync()
    window_end = time.monotonic_ns()
    seconds = time.monotonic() - start
    result = {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds,
              "device": a.device, "backend": a.dist or None, "allreduce_calls": allreduces,
              "window_ns": [window_start, window_end],
              "torch": torch.__version__,
              "cuda": torch.version.cuda,
              "nccl": ".".join(map(str, torch.cuda.nccl.version()))
              if a.device == "cuda" and torch.cuda.is_available() else None}

    def write_result():
        # the loss is read after the profiler stops: its copy to the host is not a step's
        result["loss"] = float(loss.item())
        if a.result:
            with open(a.result, "w") as f:
                json.dump(result, f, indent=1)

    if prof is not None and a.profile == "-":
        # the cost is measured; the profiler's teardown would turn every event of the run into
        # Python objects first (minutes for 15 s on an H100): leave without it
        write_result()
        print(json.dumps(result), flush=True)
        os._exit(0)
    if prof is None:
        write_result()
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels, runtime = {}, {}
        for e in prof.events():
            kind = str(getattr(e, "device_type", ""))
            if kind.endswith("CUDA"):
                kernels[e.name] = kernels.get(e.name, 0) + 1
            elif e.name.startswith("cuda") or e.name.startswith("cu"):
                runtime[e.name] = runtime.get(e.name, 0) + 1
        with open(a.profile, "w") as f:
            json.dump({"kernels": kernels, "runtime": runtime, "steps": steps}, f, indent=1)
        write_result()
    if dist is not None:
        dist.destroy_process_group()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
