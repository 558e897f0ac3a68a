# A call-heavy Python loop for bench/python_overhead.sh: N calls of a tiny function, timed
# inside the process; prints ns_per_call=X.
import sys
import time


def tiny(i):
    return i


def run(n):
    start = time.perf_counter_ns()
    for i in range(n):
        tiny(i)
    return (time.perf_counter_ns() - start) / n


print(f"ns_per_call={run(int(sys.argv[1])):.1f}")
