"""Fault injectors for eval/run that act from outside the workload: network faults on a pair of
network namespaces, and memory pressure through a memory cgroup. Each one writes its ground
truth (CLOCK_MONOTONIC ns intervals and the layer) to a JSON file. Run as root.

  inject.py net-up                 creates namespaces eacgm-ev0 and eacgm-ev1, joined by a veth
                                   pair (ev0 10.77.0.1 <-> ev1 10.77.0.2)
  inject.py net-down               removes them
  inject.py net-fault KIND VALUE AFTER HOLD TRUTH
                                   once a process runs in eacgm-ev0, waits AFTER s (or, for
                                   AFTER=@PATH, until PATH exists), then for HOLD s applies
                                   KIND to both directions of the link:
                                     loss      VALUE % of TCP segments dropped at random (nftables)
                                     throttle  the link limited to VALUE Mbit/s (tc tbf)
                                     delay     VALUE ms added to every TCP packet leaving
                                               either side (tc netem where the kernel has it;
                                               otherwise held in a netfilter queue by
                                               nfq_delay.py, through iptables NFQUEUE)
  inject.py mem-create NAME        creates a memory cgroup and prints its path
  inject.py mem-join CGROUP CMD..  moves itself into CGROUP, then runs CMD in its place
  inject.py mem-squeeze CGROUP HEADROOM_MB AFTER HOLD TRUTH
                                   once a process runs in CGROUP, waits AFTER s (or, for
                                   AFTER=@PATH, until PATH exists), then for HOLD s
                                   limits it to what it holds besides page cache (anonymous and
                                   kernel memory) plus HEADROOM_MB: the page cache charged to
                                   it (files it read first) is evicted and read again, the way
                                   a container at its memory limit thrashes
  inject.py mem-remove CGROUP      removes the cgroup (after its processes exited)
"""
import json
import os
import signal
import subprocess
import sys
import time

NS = ("eacgm-ev0", "eacgm-ev1")
DEV = ("ev0", "ev1")
ADDR = ("10.77.0.1", "10.77.0.2")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def write_truth(path, fault, layer, intervals, **extra):
    with open(path, "w") as f:
        json.dump(dict(fault=fault, layer=layer, intervals=intervals, **extra), f)


def wait_for(ready, what, timeout=120):
    t0 = time.monotonic()
    while not ready():
        if time.monotonic() - t0 > timeout:
            sys.exit(f"inject.py: {what} did not start within {timeout} s")
        time.sleep(0.05)


def net_up():
    net_down()
    for ns in NS:
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", DEV[0], "netns", NS[0], "type", "veth", "peer", "name", DEV[1],
       "netns", NS[1])
    for ns, dev, addr in zip(NS, DEV, ADDR):
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def net_down():
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)


def net_fault(kind, value, after, hold, truth):
    wait_for(lambda: sh("ip", "netns", "pids", NS[0]).stdout.strip(), f"a process in {NS[0]}")
    if after.startswith("@"):
        wait_for(lambda: os.path.exists(after[1:]), f"the workload's signal {after[1:]}")
    else:
        time.sleep(float(after))
    mode = kind
    if kind == "loss":
        # every TCP segment arriving in either namespace is dropped with this probability
        per_mille = int(round(float(value) * 10))
        apply, undo = [], []
        for ns in NS:
            nft = ("ip", "netns", "exec", ns, "nft")
            apply += [(*nft, "add", "table", "inet", "eacgm_eval"),
                      (*nft, "add", "chain", "inet", "eacgm_eval", "pre",
                       "{ type filter hook prerouting priority 0; }"),
                      (*nft, "add", "rule", "inet", "eacgm_eval", "pre", "meta", "l4proto", "tcp",
                       "numgen", "random", "mod", "1000", "lt", str(per_mille), "drop")]
            undo.append((*nft, "delete", "table", "inet", "eacgm_eval"))
    elif kind == "delay" and not has_netem():
        return net_delay_nfqueue(value, hold, truth)
    elif kind in ("throttle", "delay"):
        if kind == "delay":
            qdisc = ("netem", "delay", f"{value}ms")
        else:
            # a queue of about 50 ms at this rate: waits, not losses
            burst = max(16, int(float(value) * 1e6 / 8 * 0.005 / 1024))
            qdisc = ("tbf", "rate", f"{value}mbit", "burst", f"{burst}kb", "latency", "50ms")
        apply = [("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *qdisc)
                 for ns, dev in zip(NS, DEV)]
        undo = [("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root")
                for ns, dev in zip(NS, DEV)]
        if kind == "throttle":
            # open the link up before removing the queue, which would drop what it holds
            undo = [("ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev, "root",
                     "tbf", "rate", "10gbit", "burst", "1mb", "latency", "50ms")
                    for ns, dev in zip(NS, DEV)] + [("sleep", "0.2")] + undo
    else:
        sys.exit(f"inject.py: unknown network fault {kind!r} (loss, throttle or delay)")
    start = time.monotonic_ns()
    try:
        for cmd in apply:
            r = sh(*cmd, check=False)
            if r.returncode != 0:
                sys.exit(f"inject.py: cannot inject {kind}: {' '.join(cmd)}: {r.stderr.strip()}")
        time.sleep(hold)
    finally:  # also when stopped (SIGTERM, Ctrl-C): the link must not stay faulty
        end = None
        for cmd in undo:
            if cmd[0] == "sleep" and end is None:
                # the throttle's link is open again: what follows only tidies up (until
                # session 67 the truth ran on through it: session 66's online net_throttle
                # "missed" a window that held 0.2 s of it, all_reduce as usual, 1 ms a call)
                end = time.monotonic_ns()
            sh(*cmd, check=False)
    end = end or time.monotonic_ns()
    write_truth(truth, f"net_{mode}", "comm", [[start, end]], value=value)


def memory_root():
    """(root, v2): the memory controller's cgroup mount."""
    if os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        return "/sys/fs/cgroup/memory", False
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            if "memory" in open(f"{root}/cgroup.controllers").read().split():
                return root, True
        except OSError:
            pass
    sys.exit("inject.py: no memory cgroup controller (cgroup v1 memory or v2 with memory)")


def mem_create(name):
    root, v2 = memory_root()
    if v2:
        with open(f"{root}/cgroup.subtree_control", "w") as f:
            f.write("+memory")
    path = f"{root}/{name}"
    os.makedirs(path, exist_ok=True)
    print(path)


def mem_join(cgroup, cmd):
    with open(f"{cgroup}/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    os.execvp(cmd[0], cmd)


def unevictable_bytes(cgroup, v2):
    """What the cgroup charges minus its page cache: anonymous and kernel memory, which cannot
    be reclaimed without swap."""
    usage = int(open(f"{cgroup}/{'memory.current' if v2 else 'memory.usage_in_bytes'}").read())
    for line in open(f"{cgroup}/memory.stat"):
        key, value = line.split()
        if key == ("file" if v2 else "cache"):
            return usage - int(value)
    sys.exit(f"inject.py: no page-cache count in {cgroup}/memory.stat")


def mem_squeeze(cgroup, headroom_mb, after, hold, truth):
    _, v2 = memory_root()
    wait_for(lambda: open(f"{cgroup}/cgroup.procs").read().strip(), f"a process in {cgroup}")
    if after.startswith("@"):
        wait_for(lambda: os.path.exists(after[1:]), f"the workload's signal {after[1:]}")
    else:
        time.sleep(float(after))
    limit_file = f"{cgroup}/{'memory.max' if v2 else 'memory.limit_in_bytes'}"
    limit = unevictable_bytes(cgroup, v2) + (int(headroom_mb) << 20)
    start = time.monotonic_ns()
    try:
        try:
            with open(limit_file, "w") as f:
                f.write(str(limit))
        except OSError as e:
            # cgroup v1 answers EBUSY when reclaim cannot reach the limit at once; the limit
            # may still be in force, and is lifted below either way
            print(f"inject.py: limiting {cgroup} to {limit >> 20} MiB: {e}", file=sys.stderr)
        time.sleep(hold)
    finally:
        with open(limit_file, "w") as f:
            f.write("max" if v2 else "-1")
    write_truth(truth, "memory_pressure", "host", [[start, time.monotonic_ns()]],
                limit_mib=limit >> 20)


def has_netem():
    """Whether tc can add a netem queue (this kernel may lack sch_netem)."""
    probe = ("ip", "netns", "exec", NS[0], "tc", "qdisc", "add", "dev", "lo", "root", "netem",
             "delay", "1ms")
    if sh(*probe, check=False).returncode != 0:
        return False
    sh("ip", "netns", "exec", NS[0], "tc", "qdisc", "del", "dev", "lo", "root", check=False)
    return True


def net_delay_nfqueue(value, hold, truth):
    """Delay without netem: in each namespace, outgoing TCP packets go to a netfilter queue that
    nfq_delay.py releases VALUE ms later. --queue-bypass lets packets through whenever no
    program holds the queue, so the link never stays cut."""
    here = os.path.dirname(os.path.abspath(__file__))
    rule = ["OUTPUT", "-p", "tcp", "-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"]
    daemons, added = [], []
    start = end = None
    try:
        for ns in NS:
            d = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable,
                                  os.path.join(here, "nfq_delay.py"), "7", str(value)],
                                 stdout=subprocess.PIPE, text=True)
            daemons.append(d)
            if d.stdout.readline().strip() != "ready":
                sys.exit(f"inject.py: nfq_delay.py did not start in {ns}")
        start = time.monotonic_ns()
        for ns in NS:
            r = sh("ip", "netns", "exec", ns, "iptables", "-w", "-A", *rule, check=False)
            if r.returncode != 0:
                sys.exit(f"inject.py: cannot queue packets in {ns} (iptables NFQUEUE): "
                         f"{r.stderr.strip()}")
            added.append(ns)
        time.sleep(hold)
    finally:  # also when stopped: rules out first, then the queues let go of what they hold
        for ns in added:
            sh("ip", "netns", "exec", ns, "iptables", "-w", "-D", *rule, check=False)
        end = time.monotonic_ns()  # no packet is delayed from here on
        delayed = 0
        for d in daemons:
            d.terminate()
            out, _ = d.communicate(timeout=10)
            delayed += sum(int(w[1]) for w in (l.split() for l in out.splitlines())
                           if len(w) == 2 and w[0] == "delayed" and w[1].isdigit())
    # a fault that held no packet did not happen: say so where the score will be read
    if not delayed:
        print("inject.py: net_delay held no packet (nothing to find in this run)", file=sys.stderr)
    write_truth(truth, "net_delay", "comm", [[start, end]], value=value, method="nfqueue",
                packets_delayed=delayed)


def main():
    # stopped by eval/run's cleanup or Ctrl-C: unwind, so the `finally` blocks lift the fault
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("inject.py: stopped"))
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "net-up":
        net_up()
    elif cmd == "net-down":
        net_down()
    elif cmd == "net-fault" and len(args) == 5:
        net_fault(args[0], args[1], args[2], float(args[3]), args[4])
    elif cmd == "mem-create" and len(args) == 1:
        mem_create(args[0])
    elif cmd == "mem-join" and len(args) >= 2:
        mem_join(args[0], args[1:])
    elif cmd == "mem-squeeze" and len(args) == 5:
        mem_squeeze(args[0], int(args[1]), args[2], float(args[3]), args[4])
    elif cmd == "mem-remove" and len(args) == 1:
        os.rmdir(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
