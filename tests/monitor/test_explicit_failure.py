"""Explicit failure through a monitor (embedded broker, manual clock): a beat that says
``down`` fails its topic at once, with the reason; exact event streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import EventBatch, Failed, wall_fields
from heartwire.listeners import SubscriberListener
from tests.monitor.test_monitor_semantics import Recorder, Rig, make_rig, ms, summary


class ReasonRecorder(Recorder):
    """Failed events with their reason appended."""

    def take(self) -> list[tuple[Any, ...]]:
        out = [
            (*summary(e), e.reason) if isinstance(e, Failed) else summary(e) for e in self.events
        ]
        self.events.clear()
        return out


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig(recorder=ReasonRecorder())


@pytest.fixture
def rig3() -> Iterator[Rig]:
    yield from make_rig(recorder=ReasonRecorder(), allowed_misses=3)


def started(r: Rig) -> Rig:
    r.mon.start()
    assert r.take() == [("started", "svc.>")]
    return r


def test_down_before_any_miss_fails_at_once_with_missed_0(rig: Rig) -> None:
    r = started(rig)
    r.send("svc.a", period=1.0)
    r.clock.advance(0.25)
    r.send("svc.a", period=1.0, state="down", reason="db unreachable")
    assert r.take() == [("failed", "svc.a", 0, 250, 250, "db unreachable")]
    st = r.mon.status("svc.a")
    assert (st.state, ms(st.last_seen), ms(st.failed_since)) == ("FAILED", 250, 250)


def test_down_after_two_misses_carries_missed_2(rig3: Rig) -> None:
    r = started(rig3)
    r.send("svc.a", period=1.0)
    assert r.advance(2.5) == []  # two misses, below allowed_misses=3
    r.send("svc.a", period=1.0, state="down", reason="disk full")
    assert r.take() == [("failed", "svc.a", 2, 2500, 2500, "disk full")]


def test_allowed_misses_does_not_delay_it_repeats_do_not_fire_and_a_good_beat_resumes(
    rig3: Rig,
) -> None:
    r = started(rig3)
    r.send("svc.a", period=1.0)
    r.clock.advance(0.5)
    r.send("svc.a", period=1.0, state="down", reason="check failed")
    assert r.take() == [("failed", "svc.a", 0, 500, 500, "check failed")]
    r.clock.advance(0.25)
    r.send("svc.a", period=1.0, state="down", reason="check failed")  # no re-fire
    assert r.take() == []
    # The periods go on counting as missed, each one fires with the reason.
    assert r.advance(1.5) == [
        ("failed", "svc.a", 1, 1000, 500, "check failed"),
        ("failed", "svc.a", 2, 2000, 500, "check failed"),
    ]
    r.clock.advance(0.25)  # t = 2.5
    r.send("svc.a", period=1.0)
    assert r.take() == [("resumed", "svc.a", 2, 2500, 2000)]
    # Then a plain missed-period failure: allowed_misses applies again, no reason.
    assert r.advance(3.001) == [("failed", "svc.a", 3, 5500, 5500, None)]


def test_a_keyed_monitor_refuses_an_unsigned_down_and_honours_a_signed_one() -> None:
    gen = make_rig(recorder=ReasonRecorder(), key=b"k3y")
    r = next(gen)
    try:
        started(r)
        r.send("svc.a", state="down", reason="forged")  # r.codec has no key: unsigned
        got = r.take()
        assert [e[:2] for e in got] == [("exception", "unsigned")], got
        assert r.mon.stats()["rejected"] == {"unsigned": 1}
        r.codec = BeatCodec(key=b"k3y")
        r.send("svc.a", state="down", reason="signed")
        assert r.take() == [("failed", "svc.a", 0, 0, 0, "signed")]
    finally:
        gen.close()


def test_a_down_beat_the_python_codec_decodes_fails_too(rig: Rig) -> None:
    # A reason with a lone surrogate: the native decoder defers, BeatCodec decodes it.
    r = started(rig)
    r.broker.publish("svc.a", b'{"v":1,"topic":"svc.a","state":"down","reason":"x\\udc80"}')
    assert r.take() == [("failed", "svc.a", 0, 0, 0, "x\\udc80")]


def test_bad_state_or_reason_is_refused_as_bad_field(rig: Rig) -> None:
    r = started(rig)
    r.broker.publish("svc.a", b'{"v":1,"topic":"svc.a","state":"sideways"}')
    r.broker.publish("svc.a", b'{"v":1,"topic":"svc.a","state":"down","reason":""}')
    assert [e[:2] for e in r.take()] == [("exception", "bad_field")] * 2
    assert r.mon.stats()["rejected"] == {"bad_field": 2}
    with pytest.raises(KeyError):
        r.mon.status("svc.a")  # nothing learned from a refused beat


class Batches(SubscriberListener):
    def __init__(self) -> None:
        self.batches: list[EventBatch] = []

    def on_events(self, batch: EventBatch) -> None:
        self.batches.append(batch)


def test_the_reason_flows_through_event_batches_and_wall_fields() -> None:
    rec = Batches()
    gen = make_rig()
    r = next(gen)
    try:
        r.mon.add_listener(rec)
        r.mon.start()
        r.send("svc.a", period=1.0)
        r.send("svc.b", period=1.0, state="down", reason="because")
        r.clock.advance(1.5)
        assert r.mon.drain(5.0)
        events = [
            (b.topic_list(), b.reason_list(), [type(e).__name__ for e in b]) for b in rec.batches
        ]
        flat_topics = [t for tl, _, _ in events for t in tl]
        flat_reasons = [x for _, rl, _ in events for x in rl]
        assert list(zip(flat_topics, flat_reasons, strict=True)) == [
            ("svc.b", "because"),  # at once
            ("svc.a", None),  # 1 s: a missed period
            ("svc.b", "because"),  # the down topic's missed period, with the reason
        ]
        failed = [e for b in rec.batches for e in b]
        assert [getattr(e, "reason", "-") for e in failed] == ["because", None, "because"]
        fields = wall_fields(failed[0])
        assert fields["reason"] == "because" and fields["missed"] == 0
        sliced = rec.batches[-1].slice(0, 5)
        assert sliced.reason_list() == rec.batches[-1].reason_list()
    finally:
        gen.close()


def test_an_alert_listener_carries_the_reason_of_an_explicit_failure_only() -> None:
    from heartwire.transport.memory import MemoryBroker

    broker = MemoryBroker()
    got: list[Any] = []
    hw.Consumer(broker, "/queue/alerts", on_message=got.append).start()
    alerts = hw.AlertListener(hw.ReliableSender(broker, "/queue/alerts"))
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(broker, "svc.>", period=1.0, grace=0.0, clock=clock)
    mon.add_listener(alerts)
    mon.start()
    broker.publish("svc.a", BeatCodec().encode(Beat("svc.a", state="down", reason="db")))
    mon.expect("svc.b")
    clock.advance(1.5)
    assert mon.drain(5.0)
    mon.stop()
    bodies = [json.loads(m.body) for m in got]
    assert [(b["alert"], b["topic"], b["missed"], b.get("reason")) for b in bodies] == [
        ("failed", "svc.a", 0, "db"),
        ("failed", "svc.a", 1, "db"),
        ("failed", "svc.b", 1, None),
    ]
    assert "reason" not in bodies[2]  # a missed-period failure: no reason field at all
