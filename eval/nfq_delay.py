"""Delays the packets of a netfilter queue by a fixed time, for kernels without tc netem.

Usage: nfq_delay.py QUEUE DELAY_MS (run as root, in the network namespace whose packets
iptables sends to NFQUEUE number QUEUE). Packets are released in the order they came, each
DELAY_MS after it was queued. Prints "ready" once bound. On SIGTERM or SIGINT it releases what
it holds, prints "delayed N" (the packets it held) and exits; rules added with --queue-bypass
let traffic through once it is gone.

Speaks nfnetlink_queue directly (linux/netfilter/nfnetlink_queue.h): the kernel only needs
CONFIG_NETFILTER_NETLINK_QUEUE, and Python its standard library.
"""
import collections
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2


def attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * (-n % 4)


def message(msg, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def messages(data):
    """(type, payload after the netlink header) of each netlink message in a datagram"""
    off = 0
    while off + 16 <= len(data):
        n, kind = struct.unpack_from("=IH", data, off)
        if n < 16:
            break
        yield kind, data[off + 16:off + n]
        off += (n + 3) & ~3


def packet_id(payload):
    off = 4  # nfgenmsg
    while off + 4 <= len(payload):
        n, kind = struct.unpack_from("=HH", payload, off)
        if n < 4:
            break
        if kind & 0x7FFF == NFQA_PACKET_HDR:
            return struct.unpack_from("!I", payload, off + 4)[0]
        off += (n + 3) & ~3
    return None


def configure(sock, queue):
    """Binds the queue (metadata only, GSO packets whole, accept when full); checks each ack."""
    requests = [
        [attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0))],
        [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
         attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 8192)),
         attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN)),
         attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN))],
    ]
    for seq, attrs in enumerate(requests, 1):
        sock.send(message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, seq))
        for kind, payload in messages(sock.recv(65536)):
            if kind == NLMSG_ERROR:  # an ack: the error code (0: none), then our request
                err = -struct.unpack_from("=i", payload, 0)[0]
                if err:
                    sys.exit(f"nfq_delay.py: cannot bind queue {queue}: error {err}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    queue, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    configure(sock, queue)
    held = collections.deque()  # (release time, packet id), in arrival order
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(True))

    def release(until):
        while held and held[0][0] <= until:
            _, pid = held.popleft()
            sock.send(message(NFQNL_MSG_VERDICT, queue,
                              [attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, pid))]))

    print("ready", flush=True)
    delayed = 0
    while not stop:
        # short when idle, so that a stop request is seen at once
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else 0.1
        try:
            readable, _, _ = select.select([sock], [], [], timeout)
        except InterruptedError:
            continue
        if readable:
            data = sock.recv(1 << 20)
            now = time.monotonic()
            for kind, payload in messages(data):
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    pid = packet_id(payload)
                    if pid is not None:
                        held.append((now + delay, pid))
                        delayed += 1
        release(time.monotonic())
    release(float("inf"))
    print(f"delayed {delayed}", flush=True)  # for the truth file: did the fault take effect


if __name__ == "__main__":
    main()
