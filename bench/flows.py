#!/usr/bin/env python3
"""Conntrack entries for the flush bench, run in the agent's namespace.

flows.py FIRST COUNT: one UDP datagram from one socket to each of COUNT consecutive IPv4
addresses from FIRST (dotted), routed out of a veth nobody answers on: each is a conntrack entry.
"""

import ipaddress
import socket
import sys

first = int(ipaddress.IPv4Address(sys.argv[1]))
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    for i in range(int(sys.argv[2])):
        sock.sendto(b"x", (str(ipaddress.IPv4Address(first + i)), 40000))
