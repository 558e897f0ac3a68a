"""A minimal torchrun stand-in: runs NPROC copies of a script as the ranks of one
torch.distributed job on this host (env:// rendezvous on a free loopback port).

Debian's torchrun (python3-torch 1.13 under Python 3.11) fails before starting any worker
(AttributeError in torch.distributed.elastic's to_map), so the tests launch ranks themselves.
Usage: launch_ranks.py NPROC SCRIPT [ARGS...]; exits non-zero if any rank does.
With LAUNCH_NETNS=ns0,ns1,... each rank runs in its own network namespace (`ip netns exec`),
talks through the interface named in LAUNCH_IFNAMES (GLOO_SOCKET_IFNAME), and rank 0's store
listens on LAUNCH_MASTER_ADDR (eval/inject.py net-up makes such a pair).
LAUNCH_WRAP="CMD ARGS..." runs each rank under that command, {rank} replaced by the rank (e.g.
one `eacgm record -o rank{rank}.db --` per rank, as one recorder per host would be), and
LAUNCH_HOSTNAMES=a,b,... gives each rank a UTS namespace of its own with that host name."""
import ctypes
import os
import shlex
import socket
import subprocess
import sys

CLONE_NEWUTS = 0x04000000


def own_hostname(name):
    """For preexec_fn: a UTS namespace of the child's own, named `name` (needs root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS)")
    socket.sethostname(name)


def main():
    nproc, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    netns = [n for n in os.environ.get("LAUNCH_NETNS", "").split(",") if n]
    ifnames = os.environ.get("LAUNCH_IFNAMES", "").split(",")
    if netns and (len(netns) < nproc or len(ifnames) < nproc):
        sys.exit("launch_ranks.py: LAUNCH_NETNS and LAUNCH_IFNAMES need one entry per rank")
    if netns:
        addr, port = os.environ.get("LAUNCH_MASTER_ADDR", "127.0.0.1"), 29500  # fresh namespace
    else:
        addr = "127.0.0.1"
        with socket.socket() as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
    wrap = os.environ.get("LAUNCH_WRAP", "")
    hostnames = [h for h in os.environ.get("LAUNCH_HOSTNAMES", "").split(",") if h]
    if hostnames and len(hostnames) < nproc:
        sys.exit("launch_ranks.py: LAUNCH_HOSTNAMES needs one name per rank")
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank))
        cmd = [sys.executable, script, *args]
        if netns:
            env["GLOO_SOCKET_IFNAME"] = ifnames[rank]
            cmd = ["ip", "netns", "exec", netns[rank], *cmd]
        if wrap:
            cmd = [a.replace("{rank}", str(rank)) for a in shlex.split(wrap)] + cmd
        pre = (lambda name=hostnames[rank]: own_hostname(name)) if hostnames else None
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=pre))
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c != 0), 0))


if __name__ == "__main__":
    main()
