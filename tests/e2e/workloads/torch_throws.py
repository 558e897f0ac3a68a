"""Operators that throw (shape errors reach Python as RuntimeError), then ones that succeed:
tracing must not change what the program sees. Prints 'caught N ok M'."""
import torch

a = torch.ones(2, 3)
caught = 0
for _ in range(5):
    try:
        torch.mm(a, a)  # 2x3 @ 2x3: c10::Error thrown inside at::_ops::mm::call
    except RuntimeError:
        caught += 1
ok = sum(1 for _ in range(3) if torch.mm(a, a.t()).shape == (2, 2))
print(f"caught {caught} ok {ok}")
