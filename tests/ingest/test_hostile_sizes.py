"""Hostile sizes: a 10 MB beat body, a 1 MB topic name, 100 000 made-up topics from one sender.
Memory stays bounded (tracemalloc for Python, the detector's heap_bytes for the core), every
refusal is counted, and the real topics' failure detection stays exact (ManualClock)."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import ExceptionEvent, Failed
from heartwire.listeners import SubscriberListener
from heartwire.monitor import DEFAULT_MAX_TOPICS, HeartbeatMonitor
from heartwire.transport import Message
from heartwire.transport.memory import MemoryBroker

MB = 1 << 20


class Rec(SubscriberListener):
    """Keeps failures, counts exceptions and keeps the first 100 (its own memory stays small)."""

    def __init__(self) -> None:
        self.failed: list[Failed] = []
        self.exceptions: list[ExceptionEvent] = []
        self.exception_count = 0
        self.lock = threading.Lock()

    def on_failed(self, event: Failed) -> None:
        with self.lock:
            self.failed.append(event)

    def on_exception(self, event: ExceptionEvent) -> None:
        with self.lock:
            self.exception_count += 1
            if len(self.exceptions) < 100:
                self.exceptions.append(event)


def peak_allocated(fn: Any) -> int:
    """Peak bytes Python allocated while ``fn`` ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_the_default_topic_cap() -> None:
    mon = HeartbeatMonitor(None, "svc.>")
    assert DEFAULT_MAX_TOPICS == 1_000_000
    assert mon.metrics()["max_topics"] == DEFAULT_MAX_TOPICS


def test_a_10_mb_body_is_refused_unread_through_the_embedded_broker() -> None:
    broker = MemoryBroker()
    rec = Rec()
    mon = HeartbeatMonitor(broker, "svc.>", listeners=[rec])
    mon.start()
    try:
        body = b'{"v":1,"topic":"svc.a","payload":"' + b"x" * (10 * MB) + b'"}'
        legacy = b"svc.a" + b" " * (10 * MB) + b" HEARTBEAT"
        peak = peak_allocated(
            lambda: (broker.publish("svc.a", body), broker.publish("svc.a", legacy))
        )
        assert peak < MB, f"{peak} bytes allocated to refuse two 10 MB bodies"
        assert mon.drain()
        assert mon.stats()["rejected"] == {"too_large": 2}
        assert "svc.a" not in mon
        assert [e.reason for e in rec.exceptions] == ["too_large", "too_large"]
        assert all(len(e.detail) < 400 for e in rec.exceptions)
    finally:
        mon.stop()
        broker.close()


def test_a_1_mb_topic_name_is_refused_and_never_echoed_in_full() -> None:
    rec = Rec()
    mon = HeartbeatMonitor(None, "svc.>", listeners=[rec])
    mon.start()
    try:
        name = "svc." + "a" * MB
        small = BeatCodec().encode(Beat("svc.a"))
        mon.handle_message(Message(name, small))  # as the STOMP destination
        mon.handle_message(Message(name, f'{{"v":1,"topic":"{name}"}}'.encode()))  # in the body
        mon.handle_message(Message(name, f"{name} HEARTBEAT".encode()))  # legacy form
        with pytest.raises(ValueError, match=r"topic is 1048580 characters long, more than"):
            mon.beat(name)
        with pytest.raises(ValueError, match=r"topic is 1048580 characters long"):
            mon.expect(name)
        assert mon.drain()
        assert mon.stats()["rejected"] == {"topic_mismatch": 1, "too_large": 2}
        assert len(mon) == 0
        for e in rec.exceptions:  # neither the event nor its error carries the megabyte
            assert len(e.detail) < 400 and len(str(e.error)) < 400, e.reason
    finally:
        mon.stop()


def test_100000_bogus_topics_from_one_sender_leave_memory_bounded_and_real_topics_exact() -> None:
    clock = hw.ManualClock()
    rec = Rec()
    cap = 1000
    mon = HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, max_topics=cap, listeners=[rec]
    )
    real = [f"svc.real.{i}" for i in range(10)]
    for topic in real:
        mon.expect(topic)
    mon.start()
    codec = BeatCodec()
    frames = [
        Message(f"svc.bogus.{i}", f"svc.bogus.{i} HEARTBEAT".encode()) for i in range(100_000)
    ]

    def flood(part: list[Message]) -> None:
        for m in part:
            mon.handle_message(m)

    try:
        # the first 10 000: the cap fills, the rest is refused
        flood(frames[:10_000])
        heap_full = mon.detector.heap_bytes()
        assert mon.drain()
        # the next 90 000, with the real topics beating each period except svc.real.0
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for second in range(9):
                clock.advance(0.5)
                for topic in real[1:]:
                    mon.handle_message(Message(topic, codec.encode(Beat(topic))))
                flood(frames[10_000 + second * 10_000 : 20_000 + second * 10_000])
                clock.advance(0.5)
            clock.advance(0.25)  # past 9.0: the 9th missed period of svc.real.0
            assert mon.drain()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        stats = mon.stats()
        assert len(mon) == cap
        assert stats["learned"] == cap - len(real)
        assert stats["rejected"] == {"too_many_topics": 100_000 - (cap - len(real))}
        refused = stats["rejected"]["too_many_topics"]
        # the core's memory does not follow the refused beats: 10 000 more, the clock standing
        # still, leave it unchanged; over the whole flood (the clock moving, the real topics
        # beating) it stayed within twice its size at the cap
        heap = mon.detector.heap_bytes()
        flood(
            [Message(f"svc.extra.{i}", f"svc.extra.{i} HEARTBEAT".encode()) for i in range(10_000)]
        )
        assert mon.detector.heap_bytes() == heap
        assert heap < 2 * heap_full, (heap, heap_full)
        # listener reports of 109 010 refusals: bounded by the listener's queue, drops counted
        assert mon.drain()
        stats = mon.stats()
        assert stats["rejected"]["too_many_topics"] == refused + 10_000
        assert rec.exception_count + stats["listener_dropped"] == refused + 10_000
        assert grown < 16 * MB, f"Python memory grew {grown} bytes under 90 000 refused beats"
        # real topics: exactly one failure per missed period for the silent one, none for the rest
        real_failed = [f for f in rec.failed if f.topic.startswith("svc.real.")]
        assert [(f.topic, f.missed, f.at) for f in real_failed] == [
            ("svc.real.0", n, float(n)) for n in range(1, 10)
        ]
        assert all(mon.status(t).state is hw.State.ALIVE for t in real[1:])
    finally:
        mon.stop()
