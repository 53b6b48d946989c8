"""Reliable-delivery throughput against a real broker: messages/s with and without flushes.

Run (the broker from ``scripts/brokers start activemq``)::

    .venv/bin/python benches/reliable_bench.py                      # ActiveMQ, 20 000 messages
    .venv/bin/python benches/reliable_bench.py --url stomp://127.0.0.1:61623 --messages 50000
    .venv/bin/python benches/reliable_bench.py --json out.json

Each row sends N small messages to a fresh queue from one thread, timed from the first send
until the broker has receipted every message (for the fire-and-forget baseline: until the last
send returned, then one receipt round trip). A consumer drains the queue meanwhile, so the
broker does not pile messages up. Rows:

- ``publish (no receipts)``: ``StompTransport.send``, the transport's fire-and-forget path;
- ``reliable, no flushes``: ``ReliableSender.send`` only (one flush at the end to know when the
  broker holds all of them);
- ``reliable, flush every 1000, waited``: each flush waited for before sending on (a
  synchronous producer);
- ``reliable, flush every 1000, 5 in flight``: the producer waits only for the flush five back;
- the same with ``persistent=False``;
- ``raw stomp.py, persistent + receipts``: the baseline a user would write by hand, a plain
  ``stomp.Connection12`` sending persistent messages each with a receipt (no ids kept, no
  re-send), timed until the last receipt.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import stomp

import heartwire as hw


def drain(broker: Any, destination: str) -> hw.Consumer:
    return hw.Consumer(broker, destination, dedup=False).start()


def run_row(url: str, n: int, body: bytes, row: Callable[[Any, str, int, bytes], None]) -> float:
    destination = f"/queue/hw.bench.{uuid.uuid4().hex[:8]}"
    sender_t = hw.connect(url)
    consumer_t = hw.connect(url)
    consumer = drain(consumer_t, destination)
    try:
        started = time.perf_counter()
        row(sender_t, destination, n, body)
        return n / (time.perf_counter() - started)
    finally:
        consumer.stop()
        sender_t.close()
        consumer_t.close()


def publish_only(broker: Any, destination: str, n: int, body: bytes) -> None:
    topic_free = hw.ReliableSender(broker, destination)  # one receipt at the end
    link = broker.current_link
    for _ in range(n):
        link.send(destination, body, {"hw-message-id": "x"})
    topic_free.send(b"end")
    assert topic_free.flush(120)


def reliable(
    every: int | None, window: int, persistent: bool = True
) -> Callable[[Any, str, int, bytes], None]:
    def row(broker: Any, destination: str, n: int, body: bytes) -> None:
        sender = hw.ReliableSender(broker, destination, persistent=persistent)
        requests: list[int] = []
        for i in range(n):
            sender.send(body)
            if every and (i + 1) % every == 0:
                requests.append(sender.request_flush())
                if len(requests) > window - 1:
                    back = requests[-window]
                    assert sender.wait_flushed(back, 120), f"flush {back} timed out"
        assert sender.flush(120), f"final flush timed out: {sender.stats()}"
        sender.close()

    return row


def raw_stomp_receipts(broker: Any, destination: str, n: int, body: bytes) -> None:
    address = broker.options.brokers[0]
    receipted = 0
    all_in = threading.Event()

    class Receipts(stomp.ConnectionListener):  # type: ignore[misc]
        def on_receipt(self, frame: Any) -> None:
            nonlocal receipted
            receipted += 1  # stomp.py calls listeners on its one receiver thread
            if receipted == n:
                all_in.set()

    # vhost "/": RabbitMQ's default one (the CONNECT host header); ActiveMQ ignores it.
    conn = stomp.Connection12([(address.host, address.port)], vhost="/", auto_decode=False)
    conn.set_listener("receipts", Receipts())
    conn.connect("guest", "guest", wait=True)
    try:
        for i in range(n):
            conn.send(destination, body, headers={"receipt": str(i), "persistent": "true"})
        assert all_in.wait(120), f"raw stomp.py: {receipted} of {n} receipts within 120 s"
    finally:
        conn.disconnect()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="stomp://127.0.0.1:61613")
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    body = b"x" * args.size
    rows: list[tuple[str, Callable[[Any, str, int, bytes], None]]] = [
        ("publish (no receipts)", publish_only),
        ("reliable, no flushes", reliable(None, 1)),
        ("reliable, flush every 1000, waited", reliable(1000, 1)),
        ("reliable, flush every 1000, 5 in flight", reliable(1000, 5)),
        ("reliable non-persistent, no flushes", reliable(None, 1, persistent=False)),
        ("reliable non-persistent, flush every 1000, waited", reliable(1000, 1, persistent=False)),
        ("raw stomp.py, persistent + receipts (baseline)", raw_stomp_receipts),
    ]
    results = {}
    print(f"{args.messages} messages of {args.size} bytes to {args.url}")
    for name, row in rows:
        rate = run_row(args.url, args.messages, body, row)
        results[name] = round(rate)
        print(f"  {name:<52} {rate:>9,.0f} msg/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": args.url, "messages": args.messages, "rates": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
