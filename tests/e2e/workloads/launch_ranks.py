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
LAUNCH_HOSTNAMES=a,b,... gives each rank a UTS namespace of its own with that host name.

With LAUNCH_NNODES=N the job has N "nodes" of NPROC ranks each (torchrun --nnodes N
--nproc-per-node NPROC): LAUNCH_NETNS, LAUNCH_IFNAMES, LAUNCH_HOSTNAMES and LAUNCH_WRAP then
apply per node ({node} in LAUNCH_WRAP and in the script's arguments is the node's index), so
one recorder per node traces that node's ranks, started inside the node's namespaces as it
would run on a real host. Ranks are numbered node by node (RANK = node x NPROC + LOCAL_RANK,
GROUP_RANK = node)."""
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


def node_main(nproc, script, args):
    """One node's share of a LAUNCH_NNODES job: its NPROC local ranks (the parent set the rest
    of the environment)."""
    node, nnodes = int(os.environ["LAUNCH_NODE_RANK"]), int(os.environ["LAUNCH_NNODES"])
    procs = []
    for local in range(nproc):
        env = dict(os.environ, RANK=str(node * nproc + local), LOCAL_RANK=str(local),
                   GROUP_RANK=str(node), WORLD_SIZE=str(nnodes * nproc),
                   LOCAL_WORLD_SIZE=str(nproc))
        procs.append(subprocess.Popen([sys.executable, script, *args], env=env))
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c != 0), 0))


def nodes_main(nnodes, nproc, script, args):
    """A job of NNODES nodes: one child per node (in its namespaces, under its wrapper), each
    running node_main for its ranks."""
    netns = [n for n in os.environ.get("LAUNCH_NETNS", "").split(",") if n]
    ifnames = [n for n in os.environ.get("LAUNCH_IFNAMES", "").split(",") if n]
    hostnames = [h for h in os.environ.get("LAUNCH_HOSTNAMES", "").split(",") if h]
    for what, names in (("LAUNCH_NETNS", netns), ("LAUNCH_IFNAMES", ifnames),
                        ("LAUNCH_HOSTNAMES", hostnames)):
        if names and len(names) < nnodes:
            sys.exit(f"launch_ranks.py: {what} needs one entry per node")
    if netns and not ifnames:
        sys.exit("launch_ranks.py: LAUNCH_NETNS needs LAUNCH_IFNAMES")
    if netns:
        addr, port = os.environ.get("LAUNCH_MASTER_ADDR", "127.0.0.1"), 29500
    else:
        addr, port = "127.0.0.1", free_port()
    wrap = os.environ.get("LAUNCH_WRAP", "")
    procs = []
    for node in range(nnodes):
        env = dict(os.environ, MASTER_ADDR=addr, MASTER_PORT=str(port),
                   LAUNCH_NODE_RANK=str(node), LAUNCH_NNODES=str(nnodes))
        cmd = [sys.executable, os.path.abspath(__file__), str(nproc), script,
               *(a.replace("{node}", str(node)) for a in args)]
        if wrap:
            cmd = [a.replace("{node}", str(node)) for a in shlex.split(wrap)] + cmd
        if netns:
            env["GLOO_SOCKET_IFNAME"] = ifnames[node]
            cmd = ["ip", "netns", "exec", netns[node], *cmd]
        pre = (lambda name=hostnames[node]: own_hostname(name)) if hostnames else None
        procs.append(subprocess.Popen(cmd, env=env, preexec_fn=pre))
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c != 0), 0))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    nproc, script, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if "LAUNCH_NODE_RANK" in os.environ:
        return node_main(nproc, script, args)
    if int(os.environ.get("LAUNCH_NNODES", "1")) > 1:
        return nodes_main(int(os.environ["LAUNCH_NNODES"]), nproc, script, args)
    netns = [n for n in os.environ.get("LAUNCH_NETNS", "").split(",") if n]
    ifnames = os.environ.get("LAUNCH_IFNAMES", "").split(",")
    if netns and (len(netns) < nproc or len(ifnames) < nproc):
        sys.exit("launch_ranks.py: LAUNCH_NETNS and LAUNCH_IFNAMES need one entry per rank")
    if netns:
        addr, port = os.environ.get("LAUNCH_MASTER_ADDR", "127.0.0.1"), 29500  # fresh namespace
    else:
        addr, port = "127.0.0.1", free_port()
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
