"""CPU-profile workload: the main thread spends 70% of its CPU time in hot_py (pure Python) and
30% in the C function hot_c_spin (through ctypes, from call_c), by thread CPU time; a second
thread only sleeps. Prints the sleeper's native thread id, and at the end the CPU time the
sleeper used (its own thread clock, read as it ends: its start, its wait and its wake-up), and
when the main thread's loop ran (CLOCK_MONOTONIC ns, the clock of the samples).

Usage: hot_split.py LIBHOT_C SECONDS_OF_CPU"""
import ctypes
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
lib.hot_c_spin.argtypes = [ctypes.c_double]
lib.hot_c_spin.restype = ctypes.c_double
total = float(sys.argv[2])


def hot_py(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i
    return x


def call_c(seconds):
    return lib.hot_c_spin(seconds)


stop = threading.Event()
ids = []
sleeper_cpu = []


def sleeper():
    ids.append(threading.get_native_id())
    stop.wait()
    sleeper_cpu.append(time.thread_time())


t = threading.Thread(target=sleeper, name="sleeper")
t.start()
while not ids:
    time.sleep(0.01)
print(f"hot_split: sleeper tid {ids[0]}", flush=True)
loop_start = time.monotonic_ns()
spent = time.thread_time()
while time.thread_time() - spent < total:
    hot_py(0.07)
    call_c(0.03)
loop_end = time.monotonic_ns()
stop.set()
t.join()
print(f"hot_split: sleeper cpu {sleeper_cpu[0]:.6f} s", flush=True)
print(f"hot_split: loop from {loop_start} to {loop_end} ns", flush=True)
