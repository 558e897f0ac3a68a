"""Each round compiles a new function, fn_<i> defined on line i + 1 of its source, calls a traced
operator (aten::relu) from it, and drops it. CPython reuses the freed code object's memory for
the next one, and the next call's frame sits at the same address: what eacgm remembered of the
last stack's frames must not name this one. Prints how many distinct code object addresses the
rounds used.

(A code object is known by its address, its name object's and its first line: were the first
lines the same too, 3.10 and 3.11, which free and reuse the name strings as well, would give
every round the first one's name; a known limitation.)

Usage: recycled_code.py ROUNDS"""
import sys

import torch

x = torch.ones(4)
addresses = set()
for i in range(int(sys.argv[1])):
    ns = {"torch": torch, "x": x}
    exec("\n" * i + f"def fn_{i}():\n    return torch.relu(x)\n", ns)
    fn = ns.pop(f"fn_{i}")
    addresses.add(id(fn.__code__))
    fn()
    del fn, ns
print(f"code_addresses={len(addresses)}")
