"""Off-CPU-profile workload: a native thread (started in C: libhot_c.so's run_after_nap) that
blocks for 0.1 s before it has a Python thread state, then calls into Python (ctypes takes a
thread state for it) and sleeps 1 s in late_waiter. Prints, as one JSON line, how long that
sleep took as the workload measured it (seconds) and the thread's native id.

Usage: late_state.py LIBHOT_C"""
import ctypes
import json
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
Callback = ctypes.CFUNCTYPE(None)
lib.run_after_nap.argtypes = [Callback, ctypes.c_int]
lib.run_after_nap.restype = ctypes.c_int
truth = {}


def late_waiter():
    truth["tid"] = threading.get_native_id()
    t0 = time.monotonic()
    time.sleep(1.0)
    truth["late_waiter"] = time.monotonic() - t0


callback = Callback(late_waiter)
if lib.run_after_nap(callback, 100) != 0:
    sys.exit("late_state: cannot start the native thread")
print(json.dumps(truth), flush=True)
