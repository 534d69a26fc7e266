#!/usr/bin/env python3
"""Window prober: UDP datagrams from the pod, each with a 5-tuple no earlier probe used, so every
probe is a new conntrack entry and a fresh NAT decision (FIELD-NOTES, "Test topology").

    window.py DST SECONDS MAX_PROBES RATE

Sends from SOCKETS source ports to destination ports cycling through a range, RATE probes a second
at most, until stdin closes, SECONDS pass or MAX_PROBES are sent; prints the count sent. What the
remote saw is counted by nftables counters there (test/helpers/window.ts), not by this process.
"""
import select
import socket
import sys
import time

SOCKETS = 500
FIRST_SPORT = 20000
FIRST_DPORT = 30000
DPORTS = 30000  # SOCKETS * DPORTS distinct tuples, far more than any run sends
BATCH = 50


def main(argv):
    dst, seconds, max_probes, rate = argv[0], float(argv[1]), int(argv[2]), float(argv[3])
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    bind = "::" if family == socket.AF_INET6 else "0.0.0.0"
    socks = []
    for i in range(SOCKETS):
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.bind((bind, FIRST_SPORT + i))
        socks.append(s)
    print("ready", flush=True)
    sent = 0
    start = time.monotonic()
    deadline = start + seconds
    payload = b"window"
    while sent < max_probes:
        now = time.monotonic()
        if now >= deadline:
            break
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.buffer.read1(4096):
            break
        ahead = sent - (now - start) * rate
        if ahead > 0:
            time.sleep(min(ahead / rate, 0.01))
            continue
        for _ in range(BATCH):
            dport = FIRST_DPORT + (sent // SOCKETS) % DPORTS
            try:
                socks[sent % SOCKETS].sendto(payload, (dst, dport))
            except OSError:
                pass  # an ICMP error of an earlier probe surfacing on this socket
            sent += 1
    print(f"sent {sent}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
