"""Off-CPU-profile workload: threads that block in known Python functions for known times, and
one that never blocks. Prints, as one JSON line, how long each function was blocked as the
workload itself measured it (seconds) and each thread's native id.

- nap: 40 sleeps of 20 ms (waits longer than a sampling period: kept whole)
- doze: 400 sleeps of 0.5 ms (shorter than a period at 499 Hz: sampled)
- wait_lock: blocked on a lock the main thread holds for 0.6 s
- spin: 0.6 s of pure CPU, no wait of its own (GIL waits only; how long it was off the CPU is
  measured)

Usage: waits.py"""
import json
import threading
import time

measured = {"nap": 0.0, "doze": 0.0, "wait_lock": 0.0}
tids = {}


def timed(name, fn, *args):
    t0 = time.monotonic()
    fn(*args)
    measured[name] += time.monotonic() - t0


def nap():
    time.sleep(0.02)


def doze():
    time.sleep(0.0005)


def napper():
    tids["napper"] = threading.get_native_id()
    for _ in range(40):
        timed("nap", nap)


def dozer():
    tids["dozer"] = threading.get_native_id()
    for _ in range(400):
        timed("doze", doze)


lock = threading.Lock()


def wait_lock():
    with lock:
        pass


def locker():
    tids["locker"] = threading.get_native_id()
    timed("wait_lock", wait_lock)


def spin(seconds):
    end = time.thread_time() + seconds
    turns = 0
    while time.thread_time() < end:
        turns += 1
    return turns


def spinner():
    tids["spinner"] = threading.get_native_id()
    # it never blocks of itself, but waits for the GIL whenever another thread takes it: the
    # time it was off the CPU (blocked or preempted) bounds what a profile may say it blocked
    t0, c0 = time.monotonic(), time.thread_time()
    spin(0.6)
    measured["spin_off_cpu"] = (time.monotonic() - t0) - (time.thread_time() - c0)


lock.acquire()
threads = [threading.Thread(target=f, name=f.__name__) for f in (napper, dozer, locker, spinner)]
for t in threads:
    t.start()
time.sleep(0.6)
lock.release()
for t in threads:
    t.join()
print(json.dumps({"measured": measured, "tids": tids}), flush=True)
