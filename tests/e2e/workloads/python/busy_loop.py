# Runs Python calls for argv[1] seconds, for the attach (-p) test; prints the sum at the end.
import sys
import time


def work(i):
    return i * 2


def main(seconds):
    print("ready", file=sys.stderr, flush=True)
    total = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i in range(1000):
            total += work(i)
    print(total > 0)


main(float(sys.argv[1]))
