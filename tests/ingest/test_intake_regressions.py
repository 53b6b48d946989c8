"""Regressions from the review of the native intake (issue 15): each test failed on the first
version of the intake and holds its fix."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire import HeartbeatMonitor
from heartwire._core import FrameReader, ManualClock, Routes
from heartwire.beat import Beat, BeatCodec
from heartwire.transport.link import _waiting


def message(sub: str, topic: str, body: bytes) -> bytes:
    head = (
        f"MESSAGE\nsubscription:{sub}\ndestination:/topic/{topic}\nmessage-id:m\n"
        f"content-length:{len(body)}\n\n"
    )
    return head.encode() + body + b"\x00"


def beat(topic: str, **fields: object) -> bytes:
    return BeatCodec().encode(Beat(topic, **fields))  # type: ignore[arg-type]


def test_backlog_is_bytes_still_waiting_on_the_socket() -> None:
    # The first version judged a backlog by the read's size: never true over TLS (a read is one
    # 16 KiB record), and true for one large frame of another subscription.
    a, b = socket.socketpair()
    try:
        assert not _waiting(a)
        b.sendall(b"x" * 10)
        deadline = time.monotonic() + 5
        while not _waiting(a) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _waiting(a)
        a.recv(10)
        assert not _waiting(a)
    finally:
        a.close()
        b.close()
    assert not _waiting(a)  # closed: the next read says so
    assert not _waiting(None)


def _lag_rig(**kw: Any) -> tuple[HeartbeatMonitor, FrameReader, list[Any]]:
    events: list[Any] = []

    class Rec(hw.SubscriberListener):
        def on_lagging(self, event: Any) -> None:
            events.append(event)

    clock = ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, listeners=[Rec()], **kw)
    mon.start()
    clock.advance(120.0)  # running a while (a lag is measured back from the detector's now)
    routes = Routes()
    routes.add("s", mon._intake)
    return mon, FrameReader(routes), events


def test_a_publisher_clock_ahead_does_not_mask_a_backlog() -> None:
    """The freshest send time of a read wins: one publisher whose clock is 30 s ahead sets
    transit 0, so a backlogged read is judged 'caught up' and the guard fails open."""
    mon, reader, _ = _lag_rig()
    now = time.time()
    data = message("s", "svc.a", beat("svc.a", sent_at=now - 5)) + message(
        "s", "svc.b", beat("svc.b", sent_at=now + 30)
    )
    reader.feed(data, True)
    lag = mon.stats()["ingest_lag"]
    mon.stop()
    assert lag >= 4.0, f"a 5 s backlog reported as {lag} s"


def test_app_beat_refusals_reach_on_exception_without_other_events() -> None:
    """aeec198: beat('other.x') emitted on_exception at once (_reject). Now it is reported
    only when the dispatch thread delivers a batch of events, or at drain()/stop()."""
    got: list[Any] = []

    class Rec(hw.SubscriberListener):
        def on_exception(self, event: Any) -> None:
            got.append(event)

    mon = HeartbeatMonitor(None, "svc.>", period=60.0, listeners=[Rec()])
    mon.start()
    try:
        assert mon.beat("other.x") is False
        deadline = time.monotonic() + 1.0
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        assert got, "pattern_mismatch not reported within 1 s (no other events flowing)"
    finally:
        mon.stop()


def test_beat_many_while_stopped_counts_nothing() -> None:
    """aeec198's beat_many returned before looking at unknown names when not running
    (``if recorded == len(batch) or not self._running``): nothing refused while stopped, as
    for every other path ('not recorded while stopped', not refused)."""
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=ManualClock())
    assert mon.beat_many(["bad name!", "svc.ok"]) == 0
    assert mon.stats()["rejected"] == {}


def test_a_deferred_body_is_counted_once() -> None:
    """A body the native decoder defers is passed to stomp.py by the reader (deferred += 1),
    then handle_message asks the same intake again (deferred += 1) before BeatCodec decides."""
    from heartwire.transport import Message

    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=ManualClock())
    mon.start()
    routes = Routes()
    routes.add("s", mon._intake)
    reader = FrameReader(routes)
    # Find a body the native decoder defers (a float spelled oddly, a huge exponent, ...).
    candidates = [
        b'{"v":1,"topic":"svc.a","period":1e400}',
        b'{"v":1,"topic":"svc.a","period":1.0000000000000000000000000000001}',
        b'{"v":1,"topic":"svc.a","seq":1,"period":0.1e1}',
        b'{"v":1,"topic":"svc.a","x":' + b"[" * 200 + b"]" * 200 + b"}",
        b'{"v":1,"topic":"svc.a","sent":1e-400}',
        b'{"topic":"svc.a","v":1,"topic":"svc.b"}',
        b'{"v":1,"topic":"svc.\\u0061"}',
    ]
    body = None
    for c in candidates:
        if mon._intake.ingest(c, "svc.a") is None:
            body = c
            break
    if body is None:
        pytest.skip("no deferred body among the candidates")
    base = mon._intake.stats()["deferred"]
    left = reader.feed(message("s", "svc.a", body))
    assert left  # passed to stomp.py
    mon.handle_message(Message("svc.a", body, {}))  # what stomp.py's handler then does
    assert mon._intake.stats()["deferred"] - base == 1
    mon.stop()


def test_other_subscriptions_traffic_does_not_hold_the_monitor() -> None:
    """Backlog is judged from the read's size, whoever the bytes are for: a reliable consumer
    draining a queue of large messages (or any other subscription) on the same transport makes
    every read 'backlogged', and each routed intake, with no beat of its own in the read, holds
    its deadlines where they stand (up to max_ingest_lag, 60 s): a dead topic is not failed."""
    failed: list[Any] = []

    class Rec(hw.SubscriberListener):
        def on_failed(self, event: Any) -> None:
            failed.append(event)

    clock = ManualClock()
    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=clock, listeners=[Rec()])
    mon.start()
    mon.expect("svc.dead")
    routes = Routes()
    routes.add("s", mon._intake)
    reader = FrameReader(routes)
    queue_msg = (
        b"MESSAGE\nsubscription:reliable-1\ndestination:/queue/jobs\nmessage-id:q\nack:a\n"
        b"content-length:70000\n\n" + b"x" * 70000 + b"\x00"
    )
    for _ in range(10):
        left = reader.feed(queue_msg, True)  # stomp.py gets it; the monitor's intake is held
        assert left == queue_msg
        clock.advance(1.0)
    mon.drain()
    lag = mon.stats()["ingest_lag"]
    mon.stop()
    assert failed, f"svc.dead silent for 10 periods, not failed (ingest_lag {lag} s)"


def test_a_refusal_from_a_read_racing_stop_is_not_reported_in_the_next_run() -> None:
    """A read in progress when stop() cancels the subscription still routes its frames (the
    reader took a snapshot of the routes): a junk body is refused (decode reasons are counted
    even while stopped) after stop() took the pending refusals. Nothing reports it until the
    next start(), whose listeners then get an on_exception of the previous run."""
    order: list[str] = []

    class Rec(hw.SubscriberListener):
        def on_started(self, event: Any) -> None:
            order.append("started")

        def on_stopped(self, event: Any) -> None:
            order.append("stopped")

        def on_exception(self, event: Any) -> None:
            order.append(f"exception:{event.reason}")

    mon = HeartbeatMonitor(None, "svc.>", period=1.0, clock=ManualClock(), listeners=[Rec()])
    routes = Routes()
    routes.add("s", mon._intake)  # the snapshot a read in progress holds
    reader = FrameReader(routes)
    mon.start()
    mon.stop()
    reader.feed(message("s", "svc.a", b"{not json"))  # the read racing stop()
    mon.start()
    mon.drain()
    mon.stop()
    assert "exception:bad_json" not in order[order.index("stopped") + 1 :], order


def test_a_large_passed_frame_does_not_pin_its_size_per_connection() -> None:
    """After one 50 MB frame of another subscription passes through, the reader keeps the
    held buffer's capacity (Vec::drain never shrinks) and the larger output buffer ('keep the
    larger buffer for the next read'): ~100 MB per connection for the life of the link."""
    import gc
    import os

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20

    reader = FrameReader(Routes())
    base = rss()
    body = b"x" * (50 * 2**20)
    frame = (
        b"MESSAGE\nsubscription:reliable\ndestination:/queue/q\nmessage-id:1\n"
        b"content-length:%d\n\n" % len(body) + body + b"\x00"
    )
    del body
    step = 256 * 1024
    for i in range(0, len(frame), step):
        out = reader.feed(frame[i : i + step])
    del out, frame
    gc.collect()
    reader.feed(b"\n")
    assert rss() - base < 20, f"{rss() - base} MB still held by the reader"
