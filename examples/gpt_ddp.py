"""The Quick start's demo job: a small GPT-style model trained data-parallel on NPROC ranks
(torch.distributed with Gloo, on CPU), with two faults injected for `eacgm detect` to find.

Usage: gpt_ddp.py [--seconds S] [--nproc N] [--signal FILE]
Without RANK in its environment it launches N copies of itself as the ranks of one job (what
torchrun does) and exits with the first failing rank's status. Each step: a forward and
backward pass of a 2-block GPT on a batch of random tokens, then one all_reduce that averages
the gradients (and carries rank 0's "time is up"), then an SGD step. The model learns to
continue sequences that count up by a stride. The job trains for S
seconds (default 24), and what happens when is measured from the first step, so the phases
land alike on any machine:
  first half    normal training: what detect learns from
  62% - 76%     rank 1 straggles: in 60% of its steps its data arrives 50 ms late (a slow
                data loader), so every other rank waits for it in the all_reduce
  80%           rank 0 creates FILE (--signal): scripts/demo.sh then starts a noisy neighbour,
                three busy processes that take most of the CPUs from the job for 3 s
"""
import argparse
import os
import json
import random
import subprocess
import sys
import time

V, D, T, B, L = 64, 48, 32, 8, 2


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=24.0, help="how long to train (default 24)")
    p.add_argument("--nproc", type=int, default=2, help="ranks to launch (default 2)")
    p.add_argument("--signal", default="", help="file rank 0 creates at 80%% of the run")
    p.add_argument("--truth", default="",
                   help="each rank writes what it measured of its steps to TRUTH-rankN.json: "
                        "when it reached each all_reduce, which steps it made late, and its "
                        "wait for a CPU in each step's computing (CLOCK_MONOTONIC ns; the "
                        "tests' truth)")
    a = p.parse_args()
    if not (a.seconds > 0 and a.seconds < 86400) or a.nproc < 2:
        p.error("--seconds must be a positive number of seconds, --nproc at least 2")
    return a


def launch(a):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(a.nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc))
        env.setdefault("TORCHELASTIC_RUN_ID", f"gpt-demo-{os.getpid()}")
        procs.append(subprocess.Popen([sys.executable, *sys.argv], env=env))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


def train(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
            mask = torch.ones(T, T).tril() == 0
            att = (q @ k.transpose(-2, -1) / D**0.5).masked_fill(mask, float("-inf"))
            x = x + self.proj(F.softmax(att, dim=-1) @ v)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(T))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    def next_batch(late):
        """Sequences that count up from a random token by a random stride (mod V): a next
        token a small model learns to predict."""
        if late:
            # the data loader's stall: 50 ms, twice the 25 ms of sessions before 20, which a 2-core
            # VM's own jitter (ranks late by up to 11 ms when healthy) could hide from the model
            time.sleep(0.05)
        start, stride = torch.randint(0, V, (B, 1)), torch.randint(1, 4, (B, 1))
        seq = (start + stride * torch.arange(T + 1)) % V
        return seq[:, :T], seq[:, 1:]

    def average_gradients(model, stop):
        grads = [p.grad.view(-1) for p in model.parameters()]
        flat = torch.cat(grads + [torch.tensor([1.0 if stop else 0.0])])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        at = 0
        for g in grads:
            g.copy_(flat[at:at + g.numel()])
            at += g.numel()
        return flat[-1].item() > 0

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # one model on every rank
    torch.set_num_threads(1)
    model = GPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rng = random.Random(rank)
    dist.barrier()
    t0 = time.monotonic()
    step, signalled, late_steps, stop = 0, False, 0, False
    # per step: when its forward and backward began and when it reached the all_reduce, and
    # its wait for a CPU in between (work that never blocks: any wait is CPU contention)
    # and, at each step's start, the whole process's wait for a CPU so far (all its threads:
    # what eacgm's windows count)
    truth = {"compute_start_ns": [], "arrive_ns": [], "late": [], "run_delay_ns": [],
             "process_run_delay_ns": []}

    def run_delay_ns():  # this thread's time waiting for a CPU, as the kernel counts it
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])

    def process_run_delay_ns():
        total = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/schedstat") as f:
                    total += int(f.read().split()[1])
            except OSError:  # a thread that ended meanwhile
                pass
        return total

    while not stop:
        t = (time.monotonic() - t0) / a.seconds
        late = rank == 1 and 0.62 <= t < 0.76 and rng.random() < 0.6
        late_steps += late
        if rank == 0 and a.signal and t >= 0.80 and not signalled:
            open(a.signal, "w").close()
            signalled = True
            print(f"gpt_ddp: noisy neighbour signalled at {time.monotonic_ns()} "
                  "(CLOCK_MONOTONIC ns)", flush=True)
        idx, targets = next_batch(late)
        process_delay_ns = process_run_delay_ns() if a.truth else 0
        start_ns, delay_ns = time.monotonic_ns(), run_delay_ns() if a.truth else 0
        loss = F.cross_entropy(model(idx).view(-1, V), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        arrive_ns, compute_delay_ns = time.monotonic_ns(), run_delay_ns() - delay_ns if a.truth else 0
        stop = average_gradients(model, rank == 0 and t >= 1.0)
        opt.step()
        step += 1
        if a.truth:
            for k, v in (("compute_start_ns", start_ns), ("arrive_ns", arrive_ns),
                         ("late", int(late)), ("run_delay_ns", compute_delay_ns),
                         ("process_run_delay_ns", process_delay_ns)):
                truth[k].append(v)
    dist.destroy_process_group()
    if a.truth:
        with open(f"{a.truth}-rank{rank}.json", "w") as f:
            json.dump(truth, f)
    print(f"gpt_ddp: rank {rank}: {step} steps in {time.monotonic() - t0:.1f} s, loss "
          f"{loss.item():.3f}" + (f", {late_steps} steps late (straggling)" if late_steps else ""),
          flush=True)
    return 0


if __name__ == "__main__":
    args = parse()
    sys.exit(train(args) if "RANK" in os.environ else launch(args))
