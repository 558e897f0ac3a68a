"""A small GPT-style training loop on CPU for the torch layer's tests and benchmarks.

Per step: 9 nn.Linear (4 per block x 2 blocks + the head), 5 LayerNorm, 2 embeddings, 2
attention softmaxes, 1 cross-entropy loss, backward and an SGD step. Usage: tiny_gpt.py STEPS
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, T, B, L = 64, 32, 16, 4, 2


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
        x = self.tok(idx) + self.pos(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyGPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        idx = torch.randint(0, V, (B, T))
        loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"steps {steps} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
