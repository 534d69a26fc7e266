#!/usr/bin/env python3
"""Both ends of the source-address echo used by the packet tests.

serve PORT LIFETIME ADDRESS...
                      answer every UDP datagram / TCP connection to PORT with "ADDRESS PORT" of the
                      peer as seen here; print "ready" once bound; exit when stdin closes (the test
                      process went away) or after LIFETIME seconds. UDP binds each ADDRESS on its
                      own, so that a reply leaves from the address the probe was sent to (else
                      conntrack would not match it to the flow, and NAT would not be undone).
                      It also watches raw SCTP (132) and protocol 253 (RFC 3692, experiments) packets
                      and prints "seen PROTO TAG ADDRESS" for each: those need no reply.
probe PROTO PORT TIMEOUT ATTEMPTS [--from SRC] DST...
                      for each DST, send one probe from a new socket per attempt (a source port no
                      earlier probe of the run has: UDP sockets stay open until the run ends; hence a
                      new conntrack entry and a fresh NAT decision) and print one JSON line:
                      {"dst", "address", "port"} or {"dst", "error"}. With --from, each socket is
                      bound to the local address SRC first (a second source on the same host).
stream PROTO PORT INTERVAL DURATION DST [BIND]
                      one socket (a UDP socket, or one TCP connection) sending a message every
                      INTERVAL seconds for DURATION seconds; prints one JSON line per answer,
                      {"address", "port"} as the remote saw it, or {"error"} when none came. With
                      BIND (ADDRESS:PORT, [V6]:PORT), the socket is bound there first.
slow PORT DELAY LIFETIME ADDRESS...
                      a UDP echo like serve's that answers every datagram DELAY seconds late, as a
                      peer across a WAN does; print "ready" once bound; exit as serve does.
jitter PORT MAXDELAY LIFETIME ADDRESS...
                      as slow, each answer after a delay drawn evenly from 0 to MAXDELAY seconds,
                      as a resolver's answers come.
queries PORT RATE DURATION TIMEOUT DST
                      a DNS-like load: RATE queries a second for DURATION seconds, each from a new
                      UDP socket (a new flow) that waits TIMEOUT seconds for its one answer; prints
                      one JSON line at the end: {"sent", "answered", "sources": {address: count},
                      "lost": [time of each unanswered query, ms since the epoch]}.
blast PORT COUNT DST
                      one UDP datagram from one socket to each of COUNT ports of DST from PORT on,
                      unanswered: COUNT conntrack entries at once; prints "sent COUNT".
rawprobe PROTO PORT TAG DST...
                      send one packet per DST from a raw socket, never answered: for sctp an SCTP
                      INIT (conntrack starts a flow on it) whose initiate tag is TAG+i; for 253 a
                      payload "TAG+i". The remote's "seen" lines say which source it arrived from.
"""

import heapq
import json
import random
import struct
import select
import socket
import socketserver
import sys
import threading
import time


def reply_text(peer):
    return f"{peer[0]} {peer[1]}\n".encode()


class TcpEcho(socketserver.BaseRequestHandler):
    def handle(self):
        # Every message is answered, until the peer closes or stays silent for 30 s.
        self.request.settimeout(30)
        try:
            while self.request.recv(64):
                self.request.sendall(reply_text(self.client_address))
        except OSError:
            pass


def server_class(base, family):
    class Server(base):
        address_family = family
        allow_reuse_address = True
        daemon_threads = True

        def server_bind(self):
            # Separate IPv4 and IPv6 sockets on one port: the IPv6 one must not claim IPv4 too.
            if family == socket.AF_INET6:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            super().server_bind()

    return Server


def udp_socket(address, port):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind((address, port))
    return sock


RAW_PROTOCOLS = (132, 253)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def sctp_init(src_port, dst_port, tag):
    chunk = struct.pack("!BBHIIHHI", 1, 0, 20, tag, 65535, 1, 1, tag)
    header = struct.pack("!HHII", src_port, dst_port, 0, 0)
    checksum = crc32c(header + chunk)
    # SCTP carries its CRC32c little-endian in network order's place.
    return struct.pack("!HHI", src_port, dst_port, 0) + struct.pack("<I", checksum) + chunk


def raw_tag(proto, family, data):
    if family == socket.AF_INET:
        data = data[(data[0] & 0x0F) * 4 :]  # IPv4 raw sockets see the IP header
    if proto == 132:
        return struct.unpack("!I", data[16:20])[0] if len(data) >= 20 and data[12] == 1 else None
    try:
        return int(data.decode())
    except ValueError:
        return None


def raw_sockets(ipv6):
    families = [socket.AF_INET, socket.AF_INET6] if ipv6 else [socket.AF_INET]
    return {
        socket.socket(family, socket.SOCK_RAW, proto): (proto, family)
        for family in families
        for proto in RAW_PROTOCOLS
    }


def rawprobe(proto, port, tag, destinations):
    for i, dst in enumerate(destinations):
        family = socket.AF_INET6 if ":" in dst else socket.AF_INET
        number = 132 if proto == "sctp" else 253
        with socket.socket(family, socket.SOCK_RAW, number) as sock:
            payload = (
                sctp_init(40000 + i, port, tag + i) if number == 132 else str(tag + i).encode()
            )
            sock.sendto(payload, (dst, 0))


def serve(port, lifetime, addresses):
    tcp = socketserver.ThreadingTCPServer
    tcp_servers = [server_class(tcp, socket.AF_INET)(("0.0.0.0", port), TcpEcho)]
    if any(":" in address for address in addresses):
        tcp_servers.append(server_class(tcp, socket.AF_INET6)(("::", port), TcpEcho))
    for server in tcp_servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    udp_sockets = [udp_socket(address, port) for address in addresses]
    raw = raw_sockets(any(":" in address for address in addresses))
    print("ready", flush=True)
    deadline = time.monotonic() + lifetime
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([sys.stdin, *udp_sockets, *raw], [], [], max(left, 0))
        for sock in readable:
            if sock is sys.stdin:
                if not sys.stdin.buffer.read1(4096):
                    return
                continue
            if sock in raw:
                proto, family = raw[sock]
                data, peer = sock.recvfrom(2048)
                tag = raw_tag(proto, family, data)
                if tag is not None:
                    print(f"seen {proto} {tag} {peer[0]}", flush=True)
                continue
            try:
                _data, peer = sock.recvfrom(256)
                sock.sendto(reply_text(peer), peer)
            except OSError:
                pass  # an ICMP error for an earlier reply whose prober had already given up


def delayed(port, delay, lifetime, addresses):
    """A UDP echo on every address that answers each datagram delay() seconds late."""
    sockets = [udp_socket(address, port) for address in addresses]
    due = []  # (time, sequence, socket, peer): answers not yet sent, in time order
    sequence = 0
    print("ready", flush=True)
    deadline = time.monotonic() + lifetime
    while time.monotonic() < deadline:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, sock, peer = heapq.heappop(due)
            try:
                sock.sendto(reply_text(peer), peer)
            except OSError:
                pass
        wait = max(0.0, min(deadline - now, (due[0][0] - now) if due else 1.0))
        readable, _, _ = select.select([sys.stdin, *sockets], [], [], wait)
        for sock in readable:
            if sock is sys.stdin:
                if not sys.stdin.buffer.read1(4096):
                    return
                continue
            try:
                _data, peer = sock.recvfrom(256)
            except OSError:
                continue
            sequence += 1
            heapq.heappush(due, (time.monotonic() + delay(), sequence, sock, peer))


def queries(port, rate, duration, timeout, dst):
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    pending = {}  # socket -> (deadline, sent at in ms since the epoch)
    sent = answered = 0
    sources = {}
    lost = []
    start = time.monotonic()
    end = start + duration
    while time.monotonic() < end or pending:
        now = time.monotonic()
        while now < end and sent < (now - start) * rate:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            try:
                sock.sendto(b"query", (dst, port))
            except OSError:
                pass
            pending[sock] = (now + timeout, time.time() * 1000)
            sent += 1
        for sock, (deadline, at) in list(pending.items()):
            if deadline <= now:
                lost.append(round(at))
                del pending[sock]
                sock.close()
        next_send = start + (sent + 1) / rate if now < end else now + 0.05
        wait = max(0.0, min(next_send - time.monotonic(), 0.05))
        readable, _, _ = select.select(list(pending), [], [], wait) if pending else ([], [], [])
        if not pending:
            time.sleep(wait)
        for sock in readable:
            try:
                address = sock.recv(256).decode().split()[0]
                sources[address] = sources.get(address, 0) + 1
                answered += 1
            except (OSError, ValueError, IndexError):
                continue
            del pending[sock]
            sock.close()
    print(json.dumps({"sent": sent, "answered": answered, "sources": sources, "lost": lost}), flush=True)


def blast(port, count, dst):
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        for i in range(count):
            sock.sendto(b"x", (dst, port + i))
    print(f"sent {count}", flush=True)


def probe_once(proto, dst, port, timeout, source=None, kept=None):
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    sock = socket.socket(family, kind)
    try:
        sock.settimeout(timeout)
        if source is not None:
            sock.bind((source, 0))
        if proto == "udp":
            sock.sendto(b"probe", (dst, port))
            data = sock.recv(256)
        else:
            sock.connect((dst, port))
            sock.sendall(b"probe")
            data = sock.recv(256)
    finally:
        # A UDP socket stays open until the run ends, so that the kernel gives no later probe of
        # the run its port: a probe on a port an earlier one used would find that probe's conntrack
        # entry, and no new flow (nor NAT decision) would be made.
        if proto == "udp" and kept is not None:
            kept.append(sock)
        else:
            sock.close()
    address, seen_port = data.decode().split()
    return {"dst": dst, "address": address, "port": int(seen_port)}


def stream(proto, port, interval, duration, dst, bind=None):
    family = socket.AF_INET6 if ":" in dst else socket.AF_INET
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    deadline = time.monotonic() + duration
    with socket.socket(family, kind) as sock:
        sock.settimeout(max(interval, 0.5))
        if bind is not None:
            address, _, local_port = bind.rpartition(":")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address.strip("[]"), int(local_port)))
        if proto == "tcp":
            sock.connect((dst, port))
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                sock.sendto(b"x", (dst, port)) if proto == "udp" else sock.sendall(b"x")
                address, seen_port = sock.recv(256).decode().split()
                print(json.dumps({"address": address, "port": int(seen_port)}), flush=True)
            except (OSError, ValueError) as err:
                print(json.dumps({"error": f"{type(err).__name__}: {err}"}), flush=True)
                if proto == "tcp":
                    return
            time.sleep(max(0.0, interval - (time.monotonic() - sent)))


def probe(proto, port, timeout, attempts, destinations):
    source = None
    if len(destinations) >= 2 and destinations[0] == "--from":
        source, destinations = destinations[1], destinations[2:]
    kept = []
    for dst in destinations:
        result = {"dst": dst, "error": "no attempt made"}
        for _ in range(attempts):
            try:
                result = probe_once(proto, dst, port, timeout, source, kept)
                break
            except (OSError, ValueError) as err:
                result = {"dst": dst, "error": f"{type(err).__name__}: {err}"}
        print(json.dumps(result), flush=True)
    for sock in kept:
        sock.close()


def main(argv):
    if len(argv) >= 4 and argv[0] == "serve":
        serve(int(argv[1]), float(argv[2]), argv[3:])
    elif len(argv) >= 6 and argv[0] == "probe" and argv[1] in ("udp", "tcp"):
        probe(argv[1], int(argv[2]), float(argv[3]), int(argv[4]), argv[5:])
    elif len(argv) >= 5 and argv[0] == "slow":
        late = float(argv[2])
        delayed(int(argv[1]), lambda: late, float(argv[3]), argv[4:])
    elif len(argv) in (6, 7) and argv[0] == "stream" and argv[1] in ("udp", "tcp"):
        bind = argv[6] if len(argv) == 7 else None
        stream(argv[1], int(argv[2]), float(argv[3]), float(argv[4]), argv[5], bind)
    elif len(argv) >= 5 and argv[0] == "jitter":
        most = float(argv[2])
        delayed(int(argv[1]), lambda: random.uniform(0, most), float(argv[3]), argv[4:])
    elif len(argv) == 6 and argv[0] == "queries":
        queries(int(argv[1]), float(argv[2]), float(argv[3]), float(argv[4]), argv[5])
    elif len(argv) == 4 and argv[0] == "blast":
        blast(int(argv[1]), int(argv[2]), argv[3])
    elif len(argv) >= 5 and argv[0] == "rawprobe" and argv[1] in ("sctp", "253"):
        rawprobe(argv[1], int(argv[2]), int(argv[3]), argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
