#!/usr/bin/env python3
"""The bench's client inside the agent's namespace: one process, one keep-alive connection.

Reads commands on stdin, answers one JSON line each on stdout:
  get PATH                        -> {"status", "body"}
  swap SRC DST GEN TIMEOUT_S      -> rename SRC to DST (the config write), then poll /healthz every
                                     millisecond until it shows generation >= GEN:
                                     {"ms": write-to-seen, "latencies": [ms per request], "generation"}
  sample COUNT INTERVAL_MS        -> {"latencies": [...]} of COUNT /healthz requests
  probe SECONDS INTERVAL_MS PATH… -> {"samples": [[path, status, ms], ...]}: the paths in turn, one
                                     request every INTERVAL_MS for SECONDS (a fresh connection
                                     each, as a kubelet's probe makes; status 0: no answer in 10 s)
Exits when stdin closes. Every wait is bounded by its timeout.
"""

import http.client
import json
import os
import sys
import time

POLL_INTERVAL_S = 0.001


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = None

    def get(self, path):
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.conn.request("GET", path)
                response = self.conn.getresponse()
                return response.status, response.read().decode()
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")

    def timed_health(self):
        start = time.perf_counter()
        status, body = self.get("/healthz")
        end = time.perf_counter()
        generation = json.loads(body).get("generation", 0) if status in (200, 503) else 0
        return (end - start) * 1000, end, generation


def swap(client, src, dst, generation, timeout_s):
    latencies = []
    start = time.perf_counter()
    os.rename(src, dst)
    deadline = start + timeout_s
    while True:
        latency, end, seen = client.timed_health()
        latencies.append(latency)
        if seen >= generation:
            return {"ms": (end - start) * 1000, "latencies": latencies, "generation": seen}
        if end > deadline:
            return {"error": f"generation {generation} not seen within {timeout_s}s (last {seen})"}
        time.sleep(POLL_INTERVAL_S)


def sample(client, count, interval_ms):
    latencies = []
    for _ in range(count):
        latencies.append(client.timed_health()[0])
        time.sleep(interval_ms / 1000)
    return {"latencies": latencies}


def probe(port, seconds, interval_ms, paths):
    samples = []
    deadline = time.perf_counter() + seconds
    turn = 0
    while time.perf_counter() < deadline:
        path = paths[turn % len(paths)]
        turn += 1
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            status = conn.getresponse().status
            conn.close()
        except (OSError, http.client.HTTPException):
            status = 0
        samples.append([path, status, (time.perf_counter() - start) * 1000])
        time.sleep(interval_ms / 1000)
    return {"samples": samples}


def main(port):
    client = Client(port)
    for line in sys.stdin:
        words = line.split()
        try:
            if words[0] == "get":
                status, body = client.get(words[1])
                answer = {"status": status, "body": body}
            elif words[0] == "swap":
                answer = swap(client, words[1], words[2], int(words[3]), float(words[4]))
            elif words[0] == "probe":
                answer = probe(port, min(float(words[1]), 600), float(words[2]), words[3:])
            elif words[0] == "sample":
                answer = sample(client, min(int(words[1]), 10000), float(words[2]))
            else:
                answer = {"error": f"unknown command {words[0]}"}
        except (OSError, ValueError, IndexError, http.client.HTTPException) as err:
            answer = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
