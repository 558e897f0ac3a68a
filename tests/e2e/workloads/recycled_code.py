"""Each round compiles a new function fn_<i>, calls a traced operator (aten::relu) from it, and
drops it. CPython reuses the freed code object's memory for the next one (on 3.10 and 3.11 its
name string's too), and the next call's frame sits at the same address: eacgm must still tell
each round's function by its own name. Prints how many distinct code object addresses the
rounds used.

Usage: recycled_code.py ROUNDS [lines|same]
  lines: fn_<i> is defined on line i + 1 of its source (its first line tells it apart)
  same:  every fn_<i> is defined on line 1 (only its name does)"""
import sys

import torch

x = torch.ones(4)
addresses = set()
same_line = len(sys.argv) > 2 and sys.argv[2] == "same"
for i in range(int(sys.argv[1])):
    ns = {"torch": torch, "x": x}
    blank = "" if same_line else "\n" * i
    exec(blank + f"def fn_{i}():\n    return torch.relu(x)\n", ns)
    fn = ns.pop(f"fn_{i}")
    addresses.add(id(fn.__code__))
    fn()
    del fn, ns
print(f"code_addresses={len(addresses)}")
