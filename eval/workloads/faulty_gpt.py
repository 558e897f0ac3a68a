"""The tiny GPT training loop of the tests with a fault switch, for eval/run.

Usage: faulty_gpt.py STEPS FAULT TRUTH.json [START_FRAC END_FRAC PROB DELAY_MS]
STEPS is a number of steps, or a duration such as 110s (eval/run --online: a job long enough for
the agent to learn it first); the fractions below are then of that time.
FAULT is one of:
  python  Block.forward sleeps DELAY_MS (a slow Python function, like pytorchfi's delays)
  torch   aten::gelu runs DELAY_MS longer: its CPU kernel is replaced by one, in Python
          (torch.library), that computes the same values and sleeps when the fault is on
  none    no fault
The fault is on, with probability PROB per call, during steps [START_FRAC, END_FRAC) x STEPS.
Each faulty call's interval (CLOCK_MONOTONIC ns) goes to TRUTH.json with the fault's layer.
With EVAL_DATASET=PATH (a file of token bytes), each step reads its batch from that file instead
of drawing it, like a shuffling data loader over a dataset in the page cache: 1 MiB per step, in
a new random order of the file's 1 MiB chunks every epoch.
With EVAL_SIGNAL=FRAC:PATH, the loop creates PATH when it reaches step FRAC x STEPS (so that a
fault injected from outside, eval/inject.py mem-squeeze @PATH, lands at that point of the
training whatever the machine's speed).
Every 8th step the loop also times a fixed piece of C-level work on its own thread's CPU clock
(`sum(range(4000))`: no Python frame, so no probe of eacgm's, and waiting for a CPU does not
count): TRUTH.json's "canary" holds its median per second, so that a stretch where the CPU itself
ran slower (a hypervisor's steal, which this VM does not report, or a lower clock) can be told
from the detector's mistakes (eval/score.py --false prints it beside each window)."""
import json
import math
import os
import random
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "e2e", "workloads"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import tiny_gpt  # noqa: E402

fault, truth_path = sys.argv[2], sys.argv[3]
# "110s": run for that long, and every fraction below is of the time, not of the steps
seconds = float(sys.argv[1][:-1]) if sys.argv[1].endswith("s") else 0.0
steps = 0 if seconds else int(sys.argv[1])
start_frac, end_frac, prob, delay_ms = (float(a) for a in (sys.argv[4:8] or [0.6, 0.8, 0.2, 5]))
rng = random.Random(1)
active = False
intervals = []


def maybe_delay():
    """Sleeps when the fault is on for this call; returns the time it started."""
    if active and rng.random() < prob:
        t0 = time.monotonic_ns()
        time.sleep(delay_ms / 1000)
        return t0
    return None


class SlowBlock(tiny_gpt.Block):
    def forward(self, x):
        t0 = maybe_delay() if fault == "python" else None
        y = super().forward(x)
        if t0 is not None:
            intervals.append([t0, time.monotonic_ns()])
        return y


if fault == "torch":
    warnings.filterwarnings("ignore", "Overriding a previously registered kernel")
    _lib = torch.library.Library("aten", "IMPL")

    def gelu(x, approximate="none"):
        t0 = maybe_delay()
        # the exact gelu, from ops the traced set does not include
        y = x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
        if t0 is not None:
            intervals.append([t0, time.monotonic_ns()])
        return y

    _lib.impl("gelu", gelu, "CPU")

tiny_gpt.Block = SlowBlock
torch.manual_seed(0)
torch.set_num_threads(1)
model = tiny_gpt.TinyGPT()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
V, B, T = tiny_gpt.V, tiny_gpt.B, tiny_gpt.T
dataset = os.environ.get("EVAL_DATASET")
if dataset:
    data_fd, data_size = os.open(dataset, os.O_RDONLY), os.path.getsize(dataset)
    while os.read(data_fd, 1 << 20):  # a first pass: the dataset is in the page cache
        pass
    order = []
signal_frac, _, signal_path = os.environ.get("EVAL_SIGNAL", "").partition(":")
signal_at = float(signal_frac) if signal_path else -1.0
signalled = False
canary = []  # (CLOCK_MONOTONIC ns, thread CPU ns of the fixed work)
t_start, step = time.monotonic(), 0
while True:
    progress = (time.monotonic() - t_start) / seconds if seconds else step / steps
    if progress >= 1:
        break
    if not signalled and signal_at >= 0 and progress >= signal_at:
        open(signal_path, "w").close()
        signalled = True
    active = fault != "none" and start_frac <= progress < end_frac
    step += 1
    if step % 8 == 0:
        c0 = time.thread_time_ns()
        sum(range(4000))
        canary.append((time.monotonic_ns(), time.thread_time_ns() - c0))
    if dataset:
        # 1 MiB per step, of which the batch uses its first B x T bytes
        if not order:
            order = list(range(data_size >> 20))
            rng.shuffle(order)
        chunk = os.pread(data_fd, 1 << 20, order.pop() << 20)
        idx = torch.frombuffer(bytearray(chunk[:B * T]), dtype=torch.uint8).long().view(B, T) % V
    else:
        idx = torch.randint(0, V, (B, T))
    loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
layer = {"python": "python", "torch": "torch"}.get(fault, "none")
per_second = {}
for t, ns in canary:
    per_second.setdefault(t // 1_000_000_000, []).append(ns)
canary_s = [[s * 1_000_000_000, sorted(v)[len(v) // 2]] for s, v in sorted(per_second.items())]
with open(truth_path, "w") as f:
    json.dump({"fault": f"{fault}_latency", "layer": layer, "intervals": intervals,
               "canary": canary_s}, f)
print(f"steps {step} faulty calls {len(intervals)}")
