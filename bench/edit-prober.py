#!/usr/bin/env python3
"""Fresh UDP flows with their send time, for the edits-on-packets bench (bench/edit-packets.ts).

edit-prober.py send DST PORT INTERVAL_MS SECONDS
    One datagram every INTERVAL_MS from a new socket bound to the next source port (20000-59999
    in turn, so each is a new conntrack entry and a fresh NAT decision in the node), carrying its
    CLOCK_MONOTONIC send time in ns. Prints "sending" once the first is sent; stops after SECONDS.
edit-prober.py receive PORT SECONDS
    Prints "ready", then "SEND_NS SOURCE" for each datagram received on PORT; stops after SECONDS.
"""

import socket
import sys
import time

PORT_FIRST = 20000
PORTS = 40000


def send(dst, port, interval_ms, seconds):
    interval_ns = int(interval_ms * 1e6)
    deadline = time.monotonic_ns() + int(seconds * 1e9)
    next_at = time.monotonic_ns()
    i = 0
    while time.monotonic_ns() < deadline:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", PORT_FIRST + i % PORTS))
        sock.sendto(str(time.monotonic_ns()).encode(), (dst, port))
        sock.close()
        if i == 0:
            print("sending", flush=True)
        i += 1
        next_at += interval_ns
        pause = next_at - time.monotonic_ns()
        if pause > 0:
            time.sleep(pause / 1e9)


def receive(port, seconds):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    sock.settimeout(0.5)
    deadline = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < deadline:
        try:
            data, (source, _) = sock.recvfrom(64)
        except socket.timeout:
            continue
        print(f"{data.decode()} {source}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        receive(int(sys.argv[2]), float(sys.argv[3]))
