"""The Prometheus export of a monitor reading a real broker (ActiveMQ): the inter-arrival
histogram is counted on the native socket path (beats read off the socket by the core, no
stomp.py frame handling), and the health series show the connection."""

from __future__ import annotations

import time
import urllib.request
import uuid
from typing import Any

import pytest
import stomp  # type: ignore[import-untyped]

import heartwire as hw
from heartwire import connect
from heartwire.beat import Beat, BeatCodec
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

from heartwire.metrics import serve

pytestmark = pytest.mark.usefixtures("brokers")
FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"


def scrape(port: int, pattern: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            assert labels.pop("pattern") == pattern
            out[(s.name, frozenset(labels.items()))] = s.value
    return out


def test_socket_beats_fill_the_interval_histogram(closing: list[Any]) -> None:
    B.ensure("activemq")
    root = "p" + uuid.uuid4().hex[:10]
    transport = connect(B.url("activemq") + "?" + FAST)
    closing.append(transport)
    mon = hw.HeartbeatMonitor(transport, f"{root}.>", period=5.0, group_depth=2)
    closing.append(mon)
    mon.start()
    time.sleep(0.3)  # the subscription is in place at the broker
    sender = stomp.Connection12([(B.HOST, B.PORTS["activemq"])])
    sender.connect(wait=True)
    codec = BeatCodec()
    try:
        for seq in range(1, 4):  # 3 topics x 3 beats: 6 intervals
            for i in range(3):
                topic = f"{root}.svc.{i}"
                sender.send(f"/topic/{topic}", codec.encode(Beat(topic, seq=seq, period=5.0)))
    finally:
        sender.disconnect()
    wait_for(lambda: mon.stats()["beats"] >= 9, 10, "9 beats recorded")
    assert transport.stats()["native"] == 9, "beats read off the socket by the core"
    with serve(mon, 0, "127.0.0.1") as server:
        got = scrape(server.port, f"{root}.>")
    none: frozenset[tuple[str, str]] = frozenset()
    assert got[("heartwire_beat_interval_seconds_count", none)] == 6
    assert got[("heartwire_connected", none)] == 1
    assert got[("heartwire_running", none)] == 1
    group = frozenset({("group", f"{root}.svc"), ("state", "ALIVE")})
    assert got[("heartwire_group_topics", group)] == 3
