#!/usr/bin/env python3
"""The BPF programs' stack budget, checked on the object files, whatever the kernel here does.

The verifier refuses a program whose deepest chain of BPF-to-BPF calls uses more than 512 bytes
of stack. Kernels count that chain differently: 6.18.44 counts a bpf_loop callback's frame with
its caller's and rounds each frame to 16 bytes, older ones round to 32; a program that one kernel
loads, another refuses (session 45: every Python job's recording failed to load on 6.18.44 with
528 bytes). This takes the strictest reading of each: every frame rounded up to 32 bytes,
callbacks counted as calls, and fails past 512, naming the chain.

Usage: check_bpf_stack.py OBJECT.bpf.o...   (llvm-objdump from PATH, or LLVM_OBJDUMP)
A frame's depth is the deepest r10 offset its instructions use, as the verifier's own
stack_depth is (the deepest slot it accesses)."""
import os
import re
import shutil
import subprocess
import sys

LIMIT = 512
ROUND = 32


def objdump():
    tool = os.environ.get("LLVM_OBJDUMP") or shutil.which("llvm-objdump")
    if not tool:
        for v in range(20, 10, -1):
            tool = shutil.which(f"llvm-objdump-{v}")
            if tool:
                break
    if not tool:
        sys.exit("check_bpf_stack: no llvm-objdump (install llvm, or set LLVM_OBJDUMP)")
    return tool


def functions(tool, obj):
    """{name: (section, depth, [callees])} and the .text offsets of its functions."""
    syms = subprocess.run([tool, "-t", obj], check=True, capture_output=True, text=True).stdout
    text_at = {}  # .text byte offset -> function name (callbacks are referenced by offset)
    defined = set()
    for line in syms.splitlines():
        f = line.split()
        # "0000000000002318 l     F .text  00000000000006d0 py_walk_frame"
        if len(f) >= 6 and "F" in f[1:-3]:
            defined.add(f[-1])
            if f[-3] == ".text":
                text_at[int(f[0], 16)] = f[-1]
    dump = subprocess.run([tool, "-dr", "--no-show-raw-insn", obj], check=True,
                          capture_output=True, text=True).stdout
    funcs, section, name, last_imm = {}, None, None, None
    for line in dump.splitlines():
        if m := re.match(r"Disassembly of section (\S+):", line):
            section = m.group(1)
            continue
        if m := re.match(r"[0-9a-f]+ <(\S+)>:", line):
            if m.group(1) in defined:
                name = m.group(1)
                funcs[name] = [section, 0, []]
            continue
        if name is None:
            continue
        if m := re.search(r"\br10 - (\d+)", line):
            funcs[name][1] = max(funcs[name][1], int(m.group(1)))
        if m := re.search(r"=\s*(-?\d+) ll$", line):
            last_imm = int(m.group(1))
            continue
        if m := re.search(r"R_BPF_64_32\s+(\S+)", line):  # call -1 to a function here
            if m.group(1) in defined:
                funcs[name][2].append(m.group(1))
        elif m := re.search(r"R_BPF_64_64\s+\.text$", line):  # a callback's address
            if last_imm in text_at:
                funcs[name][2].append(text_at[last_imm])
        last_imm = None
    return funcs


def deepest(funcs, name, seen=()):
    """(bytes, chain) of the deepest chain from `name`."""
    if name in seen:  # recursion is refused by the verifier anyway
        return 0, [name + " (recursive)"]
    section, depth, callees = funcs[name]
    own = -(-max(depth, 1) // ROUND) * ROUND
    best, chain = 0, []
    for c in set(callees):
        if c in funcs:
            b, ch = deepest(funcs, c, seen + (name,))
            if b > best:
                best, chain = b, ch
    return own + best, [f"{name} {own}"] + chain


def main(objs):
    if not objs:
        sys.exit(__doc__.split("\n\n")[2])
    tool = objdump()
    worst, bad = 0, []
    for obj in objs:
        funcs = functions(tool, obj)
        programs = [n for n, f in funcs.items() if f[0] != ".text"]
        if not programs:
            sys.exit(f"check_bpf_stack: no programs found in {obj}")
        for p in programs:
            total, chain = deepest(funcs, p)
            worst = max(worst, total)
            if total > LIMIT:
                bad.append(f"{os.path.basename(obj)}: {funcs[p][0]}: {total} bytes: "
                           + " -> ".join(chain))
    for b in bad:
        print("check_bpf_stack: over the verifier's 512 bytes of stack:", b, file=sys.stderr)
    if bad:
        print("check_bpf_stack: move buffers into per-CPU array maps (as py_span_scratch) or "
              "make a frame smaller", file=sys.stderr)
        return 1
    print(f"check_bpf_stack: ok: deepest chain {worst} of {LIMIT} bytes "
          f"(frames rounded to {ROUND}, bpf_loop callbacks counted)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
