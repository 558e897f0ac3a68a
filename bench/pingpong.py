"""Worst case for the off-CPU profile: two Python threads passing a byte back and forth through
two pipes, so that each thread blocks (a read on an empty pipe) at every round trip.
Prints round_trips_per_s=X us_per_round_trip=Y.

Usage: pingpong.py ROUND_TRIPS"""
import os
import sys
import threading
import time

n = int(sys.argv[1])
a_r, a_w = os.pipe()
b_r, b_w = os.pipe()


def echo():
    for _ in range(n):
        os.write(b_w, os.read(a_r, 1))


t = threading.Thread(target=echo)
t.start()
t0 = time.perf_counter()
for _ in range(n):
    os.write(a_w, b"x")
    os.read(b_r, 1)
dt = time.perf_counter() - t0
t.join()
print(f"round_trips_per_s={n / dt:.1f} us_per_round_trip={dt / n * 1e6:.2f}", flush=True)
