#!/usr/bin/env python3
"""New-flow sender for the data-path bench, run in the pod namespace.

sender.py DST DPORT_FIRST BATCHES TARGET_MS MAX_FLOWS
Each flow is one UDP datagram from a new socket bound to its own source port, so every flow is a
new conntrack entry and a fresh NAT decision in the node. A pilot batch of 50 sizes the batches to
about TARGET_MS each (at most MAX_FLOWS flows); batch b uses destination port DPORT_FIRST + b, so
no 5-tuple repeats. Prints {"flows": n, "us": [microseconds per flow, one per batch]}.
"""

import json
import socket
import sys
import time

SOURCE_PORT_FIRST = 1024


def batch(dst, dport, flows):
    start = time.perf_counter_ns()
    for i in range(flows):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", SOURCE_PORT_FIRST + i))
        sock.sendto(b"x", (dst, dport))
        sock.close()
    return (time.perf_counter_ns() - start) / flows / 1000


def main(dst, dport_first, batches, target_ms, max_flows):
    pilot = batch(dst, dport_first, 50)
    flows = int(max(50, min(max_flows, target_ms * 1000 / max(pilot, 0.1))))
    results = [batch(dst, dport_first + 1 + b, flows) for b in range(batches)]
    print(json.dumps({"flows": flows, "pilotUs": pilot, "us": results}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
