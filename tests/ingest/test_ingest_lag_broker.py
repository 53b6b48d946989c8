"""The ingest-lag guard over a real broker (RabbitMQ): a monitor whose intake is throttled below
its feed reports ``lagging``, not failures, and ``caught_up`` once it reads its backlog.

The monitor reads its subscription natively (the core's FrameReader in front of stomp.py), and
its reads are throttled to about 60% of the feed for a few seconds (an intake-rate cap wrapped
around the connection's read, with small reads), so the broker holds the backlog and transit
grows past the period plus grace. The reader itself tells the detector, after each read, whether
it was backlogged (the read was large) and the transit of the freshest beat read.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import CaughtUp, Failed, Lagging
from heartwire.monitor import HeartbeatMonitor
from heartwire.transport import StompTransport, connect
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

pytestmark = pytest.mark.usefixtures("brokers")

N = 100  # topics
PERIOD = 0.5  # 200 beats/s
GRACE = 0.3  # generous: the publisher shares 2 loaded cores
CAP = 120.0  # beats/s the throttled intake takes: 60% of the feed
READ = 2048  # bytes per read while throttled (~14 beats)
OPTIONS = "?heartbeat=0&keepalive_interval=0&reconnect_interval=0.2&connect_timeout=5"


class Rec(hw.SubscriberListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[Any] = []

    def _add(self, event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def on_failed(self, event: Failed) -> None:
        self._add(event)

    def on_lagging(self, event: Lagging) -> None:
        self._add(event)

    def on_caught_up(self, event: CaughtUp) -> None:
        self._add(event)

    def of(self, kind: type) -> list[Any]:
        with self.lock:
            return [e for e in self.events if isinstance(e, kind)]


def test_a_throttled_intake_over_rabbitmq_reports_lagging_not_failures(
    closing: list[Any],
) -> None:
    B.ensure("rabbitmq")
    root = "lag" + uuid.uuid4().hex[:8]
    names = [f"{root}.{i:03d}" for i in range(N)]
    dead = names[0]  # stops when the throttle starts
    rec = Rec()
    sub = connect(B.url("rabbitmq") + OPTIONS, login="guest", passcode="guest")
    closing.append(sub)
    pub = connect(B.url("rabbitmq") + OPTIONS, login="guest", passcode="guest")
    closing.append(pub)
    assert isinstance(pub, StompTransport) and isinstance(sub, StompTransport)
    mon = HeartbeatMonitor(
        sub, f"{root}.*", period=PERIOD, grace=GRACE, lag_threshold=0.5, listeners=[rec]
    )
    closing.append(mon)
    codec = BeatCodec()
    det = mon.detector
    throttle = threading.Event()
    mon.start()
    link = sub.current_link
    assert link is not None and link.reader is not None
    transport = link._conn.transport
    native_read = transport.receive  # the core's reader in front of stomp.py
    plain_size = transport._Transport__recv_bytes
    state = {"next": 0.0}

    def throttled() -> Any:
        # An intake-rate cap: small reads, at most CAP beats' worth a second.
        if throttle.is_set():
            transport._Transport__recv_bytes = READ
            now = time.monotonic()
            state["next"] = max(state["next"], now) + (READ / 150) / CAP
            time.sleep(max(0.0, state["next"] - now))
        else:
            transport._Transport__recv_bytes = plain_size
        return native_read()

    transport.receive = throttled
    time.sleep(0.3)  # SUBSCRIBE is not acknowledged: let the broker register it

    stop = threading.Event()
    stopped_dead = threading.Event()

    def publish() -> None:
        # Every topic once per period, spread over the period.
        gap = PERIOD / N
        t = time.monotonic()
        while not stop.is_set():
            for name in names:
                if name == dead and stopped_dead.is_set():
                    continue
                body = codec.encode(Beat(name, sent_at=time.time(), period=PERIOD))
                pub.send(name, body)
                t += gap
                delay = t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    publisher = threading.Thread(target=publish, name="lag-publisher", daemon=True)
    publisher.start()
    try:
        wait_for(lambda: len(mon) == N, 10, f"the monitor to learn the {N} topics")
        time.sleep(1.5)  # keeping up
        assert rec.of(Failed) == [] and rec.of(Lagging) == []
        throttle.set()
        stopped_dead.set()
        time.sleep(4.0)  # 60% of the feed: the backlog grows at the broker
        assert rec.of(Lagging), f"no lagging after 4 s throttled (lag {det.lag})"
        throttle.clear()
        wait_for(lambda: rec.of(CaughtUp), 15, "caught_up once the intake is unthrottled")
        time.sleep(2 * (PERIOD + GRACE))  # the dead one's deadline is judged at the clock now
        wait_for(lambda: rec.of(Failed), 5, f"{dead} to be reported failed")
    finally:
        stop.set()
        publisher.join(5)
    assert mon.drain(timeout=10)
    fails = rec.of(Failed)
    assert {e.topic for e in fails} == {dead}, f"false failures: {fails[:5]}"
    lagging, caught_up = rec.of(Lagging), rec.of(CaughtUp)
    assert len(lagging) == 1 and len(caught_up) == 1, rec.events
    # The backlog was real: beats were read later than their deadlines (period plus grace
    # after the topic's previous beat), so judged at the clock they would have failed.
    assert caught_up[0].max_lag > PERIOD + GRACE, caught_up
    assert lagging[0].lag > 0.5
    stats = mon.stats()
    assert stats["lagging"] == 1 and stats["ingest_lag"] == 0.0
    assert stats["rejected"] == {}
    assert sub.stats()["native"] >= N * 4, "the beats were read by the core, not stomp.py"
    assert link.reader.pending < READ, "at most one partial frame is held"
