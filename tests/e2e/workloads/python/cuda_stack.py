# Calls the CUDA runtime (through ctypes) from known Python functions, for the python layer's
# stack attribution test. argv[1]: libcudart.so.13. Without a GPU the calls fail; they still run.
import ctypes
import sys, time
time.sleep(0.3)  # stacks begin once the recorder has read this libpython (docs/layers.md)
lib = ctypes.CDLL(sys.argv[1])


def allocate(n):
    p = ctypes.c_void_p()
    return lib.cudaMalloc(ctypes.byref(p), n)  # line 11


def layer():
    return allocate(4096)  # line 15


class Trainer:
    def step(self):
        return layer()  # line 20


Trainer().step()  # line 23
lib.cudaFree(None)  # line 24
