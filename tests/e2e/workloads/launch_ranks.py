"""A minimal torchrun stand-in: runs NPROC copies of a script as the ranks of one
torch.distributed job on this host (env:// rendezvous on a free loopback port).

Debian's torchrun (python3-torch 1.13 under Python 3.11) fails before starting any worker
(AttributeError in torch.distributed.elastic's to_map), so the tests launch ranks themselves.
Usage: launch_ranks.py NPROC SCRIPT [ARGS...]; exits non-zero if any rank does."""
import os
import socket
import subprocess
import sys


def main():
    nproc, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, script, *args], env=env))
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c != 0), 0))


if __name__ == "__main__":
    main()
