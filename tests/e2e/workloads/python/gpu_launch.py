# Launches kernels through the CUDA runtime from known Python functions, and hands the GPU
# executions a GPU would give to the gputime batcher (libeacgm_cupti_pylaunch.so, argv[1]):
# for following a kernel to its launch call and Python stack. argv[2]: how many.
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
# stacks begin once the recorder has read this libpython (docs/layers.md), and the batcher's
# probe once it has seen this library mapped (record attaches its own injection library before
# the command runs; this one it finds at the dlopen)
time.sleep(1)


def forward(n):
    return lib.eacgm_pylaunch(n, 250000)  # line 16


def train_step(n):
    return forward(n)  # line 20


print(train_step(int(sys.argv[2])))
