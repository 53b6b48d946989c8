"""Explicit failure over real brokers (ActiveMQ, RabbitMQ): a dependent publisher whose TCP
check fails sends ``down``, and the monitor reports ``Failed`` with the reason within one
network round trip, not a period later (periods of 30 s, bounded waits well under them)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from typing import Any

import pytest

import heartwire as hw
from heartwire import checks, connect
from heartwire.beat import Beat, BeatCodec
from heartwire.cli import main
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

pytestmark = pytest.mark.usefixtures("brokers")

FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
PERIOD = 30.0
#: Far below a period: a failure reported here did not wait for a missed deadline.
WAIT = 5.0


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def subscribed(mon: hw.HeartbeatMonitor, transport: Any, root: str, key: str | None = None) -> None:
    """Wait (bounded) until ``mon`` hears beats under ``root``: its subscription is in place."""
    probe = f"{root}.probe"
    body = BeatCodec(key).encode(Beat(probe, period=PERIOD))
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        transport.publish(probe, body)
        time.sleep(0.05)
        try:
            mon.status(probe)
            return
        except KeyError:
            continue
    raise AssertionError(f"the monitor heard no probe beat on {probe} within {WAIT} s")


class Failures(hw.SubscriberListener):
    def __init__(self) -> None:
        self.failed: list[tuple[float, hw.Failed]] = []
        self.errors: list[hw.ExceptionEvent] = []
        self.changed = threading.Condition()

    def on_failed(self, event: hw.Failed) -> None:
        with self.changed:
            self.failed.append((time.time(), event))
            self.changed.notify_all()

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        self.errors.append(event)

    def wait(self, timeout: float) -> tuple[float, hw.Failed]:
        with self.changed:
            ok = self.changed.wait_for(lambda: self.failed, timeout)
        assert ok, f"no Failed within {timeout} s; exceptions: {self.errors}"
        return self.failed[0]


@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_a_dependent_publisher_whose_tcp_check_fails_is_reported_failed_at_once(
    name: str, closing: list[Any]
) -> None:
    B.ensure(name)
    root = f"x{uuid.uuid4().hex[:10]}"
    topic = f"{root}.db"
    port = closed_port()
    mon_t = connect(B.url(name) + "?" + FAST)
    closing.append(mon_t)
    seen = Failures()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=PERIOD, allowed_misses=3, listeners=[seen])
    closing.append(mon)
    mon.start()
    pub_t = connect(B.url(name) + "?" + FAST)
    closing.append(pub_t)
    check = checks.tcp("127.0.0.1", port, timeout=2.0)
    pub = hw.HeartbeatPublisher(pub_t, topic, PERIOD, dependency=check)
    closing.append(pub)
    subscribed(mon, pub_t, root)
    t0 = time.time()
    pub.start()  # the first beat (its check) at once
    at, failed = seen.wait(WAIT)
    latency = at - t0
    print(f"\n{name}: explicit fail latency {latency * 1000:.1f} ms (check + send + delivery)")
    assert failed.topic == topic and failed.missed == 0
    assert failed.reason is not None
    assert failed.reason.startswith(f"tcp 127.0.0.1:{port}: "), failed.reason
    assert "refused" in failed.reason.lower(), failed.reason
    assert latency < WAIT
    assert mon.status(topic).state == "FAILED"
    assert pub.stats()["down_sent"] == 1 and pub.sent == 0


def test_the_cli_sends_a_signed_down_over_activemq(
    closing: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    B.ensure("activemq")
    root = f"x{uuid.uuid4().hex[:10]}"
    topic = f"{root}.cli"
    key = "cli-key"
    mon_t = connect(B.url("activemq") + "?" + FAST)
    closing.append(mon_t)
    seen = Failures()
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=PERIOD, key=key, listeners=[seen])
    closing.append(mon)
    mon.start()
    subscribed(mon, mon_t, root, key)
    # Unsigned: refused and counted, nothing fails.
    url = B.url("activemq") + "?" + FAST
    assert main(["fail", topic, "--reason", "forged", "--broker", url]) == 0
    assert main(["fail", topic, "--reason", "disk full", "--broker", url, "--key", key]) == 0
    _, failed = seen.wait(WAIT)
    assert (failed.topic, failed.missed, failed.reason) == (topic, 0, "disk full")
    assert mon.stats()["rejected"] == {"unsigned": 1}
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1] == {"event": "down", "topic": topic, "reason": "disk full"}
