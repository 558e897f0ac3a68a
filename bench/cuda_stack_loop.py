"""A tight loop of one CUDA runtime call (cudaFree(NULL) through ctypes; without a GPU it fails
but runs, so probes fire) DEPTH Python frames deep, for any CPython (no PyTorch needed): what a
CUDA call's Python stack costs on 3.10-3.13, with and without --python-calls (bench/README.md,
"Torch, comm and python layers"). Usage: cuda_stack_loop.py LIBCUDART N DEPTH. Prints
'ns_per_call=X' for the timed loop (after a warm-up)."""
import ctypes
import sys
import time

from nest import at_depth

time.sleep(0.5)  # stacks begin once the recorder has read this interpreter (docs/layers.md)
lib = ctypes.CDLL(sys.argv[1])
n, depth = int(sys.argv[2]), int(sys.argv[3])
free = lib.cudaFree


def loop():
    for _ in range(1000):
        free(None)
    t0 = time.perf_counter()
    for _ in range(n):
        free(None)
    return time.perf_counter() - t0


print(f"ns_per_call={at_depth(depth, loop) / n * 1e9:.0f}")
