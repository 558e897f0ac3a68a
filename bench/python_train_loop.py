# A small PyTorch (CPU) training loop for bench/python_overhead.sh: a 3-layer MLP, STEPS steps;
# prints ms_per_step=X, timed inside the process after a warm-up.
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                      nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
x = torch.randn(32, 64)
y = torch.randint(0, 10, (32,))


def step():
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


for _ in range(20):
    step()
steps = int(sys.argv[1])
start = time.perf_counter()
for _ in range(steps):
    step()
print(f"ms_per_step={(time.perf_counter() - start) * 1e3 / steps:.3f}")
