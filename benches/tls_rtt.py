"""Round trip of one message over STOMP with and without TLS (issue 8): publish -> receive.

One transport subscribes to a topic and publishes to it; each sample is the time from
``publish`` to the handler's call (on stomp.py's receiver thread), one message at a time. The
``tls`` broker of scripts/brokers (ActiveMQ, ``stomp+ssl://127.0.0.1:61612``) and the plain
ActiveMQ (``stomp://127.0.0.1:61613``, same version and JVM settings) are measured in turns,
so load on the machine hits both alike. Needs both brokers: ``scripts/brokers start activemq tls``.

    .venv/bin/python benches/tls_rtt.py [--n 2000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

from heartwire.transport import Message, connect

CERTS = Path(os.environ.get("HEARTWIRE_BROKERS_DIR", "/tmp/heartwire-brokers")) / "tls" / "certs"
OPTS = "keepalive_interval=0&heartbeat=0&connect_timeout=5"


def measure(url: str, n: int, **options: object) -> list[float]:
    """``n`` publish -> receive times in seconds, one message in flight at a time."""
    t = connect(f"{url}?{OPTS}", **options)
    try:
        topic = "rtt" + uuid.uuid4().hex[:8]
        got = threading.Event()
        at = [0.0]

        def handler(_: Message) -> None:
            at[0] = time.perf_counter()
            got.set()

        t.subscribe(topic, handler)
        time.sleep(0.3)
        body = b'{"v":1,"topic":"' + topic.encode() + b'","seq":1}'  # beat-sized
        samples = []
        for i in range(n + 50):  # 50 warm-up messages
            got.clear()
            t0 = time.perf_counter()
            t.publish(topic, body)
            if not got.wait(5):
                raise RuntimeError(f"{url}: message {i} not received within 5 s")
            if i >= 50:
                samples.append(at[0] - t0)
        return samples
    finally:
        t.close()


def connect_times(url: str, n: int, **options: object) -> list[float]:
    """``n`` times to open a transport (TCP, TLS handshake, CONNECT/CONNECTED), seconds."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        t = connect(f"{url}?{OPTS}", **options)
        out.append(time.perf_counter() - t0)
        t.close()
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="messages per round and broker")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    runs = {
        "plain stomp://127.0.0.1:61613": ("stomp://127.0.0.1:61613", {}),
        "tls stomp+ssl://127.0.0.1:61612": (
            "stomp+ssl://127.0.0.1:61612",
            {"ssl_ca_file": str(CERTS / "ca.pem")},
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    opening: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, (url, options) in runs.items():
            samples[name] += measure(url, args.n, **options)
            opening[name] += connect_times(url, 10, **options)
    print(f"publish -> receive, {args.rounds} x {args.n} messages each, ms")
    print(f"{'':34} {'p50':>7} {'p90':>7} {'p99':>7} {'mean':>7}")
    for name, xs in samples.items():
        row = [pct(xs, 0.5), pct(xs, 0.9), pct(xs, 0.99), statistics.fmean(xs)]
        print(f"{name:34} " + " ".join(f"{x * 1e3:7.3f}" for x in row))
    print(f"connect (TCP + TLS + CONNECTED), {args.rounds} x 10 each, ms")
    for name, xs in opening.items():
        row = [pct(xs, 0.5), pct(xs, 0.9), pct(xs, 0.99), statistics.fmean(xs)]
        print(f"{name:34} " + " ".join(f"{x * 1e3:7.3f}" for x in row))


if __name__ == "__main__":
    main()
