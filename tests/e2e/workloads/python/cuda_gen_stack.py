# Calls the CUDA runtime (through ctypes) from a generator and from a coroutine under a deep
# chain of plain calls, for the stack walk's frames that lie outside the thread's data stack
# (3.11+ keeps a generator's or coroutine's frame in its object) and for walks longer than one
# 2 KiB block of frames. argv[1]: libcudart.so.13. Without a GPU the calls fail; they still run.
import ctypes
import sys, time
time.sleep(0.3)  # stacks begin once the recorder has read this libpython (docs/layers.md)
lib = ctypes.CDLL(sys.argv[1])


def batches():
    p = ctypes.c_void_p()
    yield lib.cudaMalloc(ctypes.byref(p), 4096)  # line 13


async def release():
    return lib.cudaFree(None)  # line 17


def deep(k):
    a = b = c = d = e = f = g = h = k  # locals: 25 frames of ~200 bytes
    if k == 0:
        for _ in batches():  # line 23
            pass
        co = release()
        try:
            co.send(None)  # line 27
        except StopIteration:
            pass
        return 0
    return deep(k - 1) + a + b + c + d + e + f + g + h  # line 31


deep(24)  # line 34
