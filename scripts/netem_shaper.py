#!/usr/bin/env python3
"""A userspace stand-in for `tc netem` delay, jitter and loss, for scripts/netem.sh on kernels
built without sch_netem (and without module loading).

iptables' NFQUEUE target hands packets to this process over netlink (NETLINK_NETFILTER,
nfnetlink_queue); it drops each with the queue's loss probability, holds the others for the
queue's delay plus a uniform jitter in [-jitter, +jitter] (netem's default distribution; packets
may be reordered, as with netem) and then lets them go (NF_ACCEPT). The packets themselves, their
addresses and ports are unchanged: only their timing and whether they arrive.

usage: netem_shaper.py --queue NUM:DELAY_MS:JITTER_MS:LOSS_PERCENT [--queue ...]
                       [--seed N] [--stats FILE]
Runs until SIGTERM or SIGINT, then lets the held packets go, unbinds its queues and writes
per-queue counters (packets, dropped, bytes, mean and largest applied delay) as JSON to --stats.
Standard library only; Linux only; needs CAP_NET_ADMIN in the network namespace it runs in.
Exit 0 after a signal, 1 when a queue cannot be bound or the socket fails.
"""

import argparse
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_PACKET = 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
# The first bytes of each packet are copied to us: enough for the IPv4 total length.
COPY_RANGE = 20


class Queue:
    """One NFQUEUE number, its link parameters and its counters."""

    def __init__(self, spec):
        try:
            num, delay, jitter, loss = spec.split(":")
            self.num, self.delay, self.jitter = int(num), float(delay), float(jitter)
            self.loss = float(loss)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r} is not NUM:DELAY_MS:JITTER_MS:LOSS_PERCENT")
        if not (0 <= self.num < 65536 and self.delay >= 0 and 0 <= self.jitter <= self.delay
                and 0 <= self.loss <= 100):
            raise argparse.ArgumentTypeError(f"{spec!r}: queue 0..65535, 0 <= jitter <= delay, "
                                             "loss 0..100")
        self.packets = self.dropped = self.bytes = 0
        self.delay_sum = self.delay_max = 0.0

    def stats(self):
        passed = self.packets - self.dropped
        return {
            "queue": self.num, "delay_ms": self.delay, "jitter_ms": self.jitter,
            "loss_percent": self.loss, "packets": self.packets, "dropped": self.dropped,
            "bytes": self.bytes,
            "dropped_percent": round(100.0 * self.dropped / self.packets, 2) if self.packets else 0.0,
            "mean_delay_ms": round(self.delay_sum / passed, 2) if passed else 0.0,
            "max_delay_ms": round(self.delay_max, 2),
        }


def attr(kind, payload):
    """A netlink attribute, padded to 4 bytes."""
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + b"\0" * (-size % 4)


def message(kind, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    """An nfnetlink_queue message for queue number `queue`."""
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + b"".join(attrs)
    head = struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0)
    return head + body


def messages(data):
    """(type, payload) of every netlink message in a datagram."""
    offset = 0
    while offset + 16 <= len(data):
        size, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, offset)
        if size < 16:
            return
        yield kind, data[offset + 16:offset + size]
        offset += (size + 3) & ~3


def attributes(payload):
    """{type: value} of the attributes after the nfgenmsg header."""
    found, offset = {}, 4
    while offset + 4 <= len(payload):
        size, kind = struct.unpack_from("=HH", payload, offset)
        if size < 4:
            break
        found[kind & 0x7FFF] = payload[offset + 4:offset + size]
        offset += (size + 3) & ~3
    return found


def configure(sock, queue, seq):
    """Binds `queue` to this socket and asks for the packets' first bytes; raises on refusal."""
    requests = [
        [attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, 0))],
        [attr(NFQA_CFG_PARAMS, struct.pack(">IB", COPY_RANGE, NFQNL_COPY_PACKET)),
         attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 8192))],
    ]
    for attrs in requests:
        seq += 1
        sock.send(message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, seq))
        deadline = time.monotonic() + 2.0
        while True:
            ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise OSError(f"queue {queue}: no answer from nfnetlink_queue")
            acked = False
            for kind, payload in messages(sock.recv(65536)):
                if kind == NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", payload)
                    if error:
                        raise OSError(-error, f"queue {queue}: {os.strerror(-error)}")
                    acked = True
            if acked:
                break
    return seq


def verdict(sock, queue, packet_id, decision):
    sock.send(message(NFQNL_MSG_VERDICT, queue,
                      [attr(NFQA_VERDICT_HDR, struct.pack(">II", decision, packet_id))]))


def on_packet(sock, queues, payload, held, rng, now):
    """Drops or schedules one queued packet."""
    queue_num = struct.unpack_from(">H", payload, 2)[0]
    found = attributes(payload)
    if NFQA_PACKET_HDR not in found or queue_num not in queues:
        return
    packet_id = struct.unpack_from(">I", found[NFQA_PACKET_HDR])[0]
    queue = queues[queue_num]
    queue.packets += 1
    data = found.get(NFQA_PAYLOAD, b"")
    if len(data) >= 4 and data[0] >> 4 == 4:
        queue.bytes += struct.unpack_from(">H", data, 2)[0]
    if rng.random() * 100.0 < queue.loss:
        queue.dropped += 1
        verdict(sock, queue_num, packet_id, NF_DROP)
        return
    delay = max(0.0, queue.delay + rng.uniform(-queue.jitter, queue.jitter))
    queue.delay_sum += delay
    queue.delay_max = max(queue.delay_max, delay)
    heapq.heappush(held, (now + delay / 1000.0, packet_id, queue_num))


def run(queues, seed):
    """The loop: packets in, verdicts out when due, until a signal."""
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((0, 0))
    seq = 0
    for num in queues:
        seq = configure(sock, num, seq)
    rng, held, overruns = random.Random(seed), [], 0
    print(f"netem_shaper: queues {sorted(queues)} bound (seed {seed})", flush=True)
    while not stop:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, packet_id, queue_num = heapq.heappop(held)
            verdict(sock, queue_num, packet_id, NF_ACCEPT)
        timeout = min(0.05, max(0.0, held[0][0] - now)) if held else 0.05
        try:
            ready, _, _ = select.select([sock], [], [], timeout)
        except InterruptedError:
            continue
        if not ready:
            continue
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            continue
        except OSError as error:
            if error.errno == 105:  # ENOBUFS: the kernel dropped messages; go on
                overruns += 1
                continue
            raise
        now = time.monotonic()
        for kind, payload in messages(data):
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                on_packet(sock, queues, payload, held, rng, now)
    for _, packet_id, queue_num in held:
        verdict(sock, queue_num, packet_id, NF_ACCEPT)
    for num in queues:
        sock.send(message(NFQNL_MSG_CONFIG, num,
                          [attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_UNBIND, 0))]))
    return overruns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", action="append", type=Queue, required=True,
                        help="NUM:DELAY_MS:JITTER_MS:LOSS_PERCENT (repeat)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stats", default=None, help="write counters as JSON here at exit")
    args = parser.parse_args()
    queues = {q.num: q for q in args.queue}
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    try:
        overruns = run(queues, seed)
    except OSError as error:
        print(f"netem_shaper: {error}", file=sys.stderr)
        return 1
    if args.stats:
        with open(args.stats, "w") as out:
            json.dump({"seed": seed, "overruns": overruns,
                       "queues": [q.stats() for q in queues.values()]}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
