"""The monitor's events under the manual clock: design.md §2, exactly, through a broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import (
    ExceptionEvent,
    Failed,
    Received,
    Resumed,
    Started,
    State,
    Stopped,
)
from heartwire.listeners import SubscriberListener
from heartwire.monitor import HeartbeatMonitor, HeartbeatSubscriber
from heartwire.transport import Transport, connect


def ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


class Recorder(SubscriberListener):
    """Every event, as comparable tuples (times in whole milliseconds)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_started(self, event: Started) -> None:
        self.events.append(event)

    def on_stopped(self, event: Stopped) -> None:
        self.events.append(event)

    def on_failed(self, event: Failed) -> None:
        self.events.append(event)

    def on_resumed(self, event: Resumed) -> None:
        self.events.append(event)

    def on_exception(self, event: ExceptionEvent) -> None:
        self.events.append(event)

    def take(self) -> list[tuple[Any, ...]]:
        out = [summary(e) for e in self.events]
        self.events.clear()
        return out


class ReceivedRecorder(Recorder):
    def on_received(self, event: Received) -> None:
        self.events.append(event)


def summary(e: Any) -> tuple[Any, ...]:
    if isinstance(e, Failed):
        return ("failed", e.topic, e.missed, ms(e.at), ms(e.since))
    if isinstance(e, Resumed):
        return ("resumed", e.topic, e.missed, ms(e.at), ms(e.downtime))
    if isinstance(e, Received):
        return ("received", e.topic, e.seq, ms(e.at))
    if isinstance(e, ExceptionEvent):
        return ("exception", e.reason)
    if isinstance(e, Started):
        return ("started", e.source)
    if isinstance(e, Stopped):
        return ("stopped", e.source)
    raise AssertionError(e)


@dataclass
class Rig:
    clock: hw.ManualClock
    broker: Transport
    rec: Recorder
    mon: HeartbeatMonitor
    codec: BeatCodec = field(default_factory=BeatCodec)

    def send(self, topic: str, **fields: Any) -> None:
        """Publish a JSON beat for ``topic`` (synchronously delivered by the embedded broker)."""
        self.broker.publish(topic, self.codec.encode(Beat(topic, **fields)))

    def advance(self, seconds: float) -> list[tuple[Any, ...]]:
        """Move the clock, wait for the listeners, return what they got."""
        self.clock.advance(seconds)
        return self.take()

    def take(self) -> list[tuple[Any, ...]]:
        assert self.mon.drain(5.0)
        return self.rec.take()


def make_rig(
    pattern: str = "svc.>", recorder: Recorder | None = None, **options: Any
) -> Iterator[Rig]:
    clock = hw.ManualClock()
    broker = connect()
    rec = recorder if recorder is not None else Recorder()
    # Exact deadlines unless a test asks otherwise: the default grace (10% of each topic's
    # period) has its own tests in test_monitor_grace.py.
    options.setdefault("grace", 0.0)
    mon = HeartbeatMonitor(broker, pattern, clock=clock, listeners=[rec], **options)
    try:
        yield Rig(clock, broker, rec, mon)
    finally:
        mon.stop()
        broker.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from make_rig()


@pytest.fixture
def rrig() -> Iterator[Rig]:
    """A rig whose listener wants on_received."""
    yield from make_rig(recorder=ReceivedRecorder())


# -- design.md §2, one event at a time ---------------------------------------------------------


def test_never_heard_topic_fails_one_period_after_start_not_after_expect(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.clock.advance(5.0)  # not started: nothing is watched
    assert rig.mon.status("svc.a").state is State.STOPPED
    rig.mon.start()
    assert rig.take() == [("started", "svc.>")]
    assert rig.mon.status("svc.a").state is State.PENDING
    assert rig.advance(1.0) == []  # exactly at the deadline: still on time
    assert rig.advance(0.001) == [("failed", "svc.a", 1, 6000, 6000)]
    st = rig.mon.status("svc.a")
    assert (st.state, st.missed, st.last_seen, ms(st.failed_since)) == (State.FAILED, 1, None, 6000)


def test_failed_every_further_period_then_resumed_and_received_at_the_beat(rrig: Rig) -> None:
    rrig.mon.expect("svc.a")
    rrig.mon.start()
    assert rrig.advance(4.5) == [
        ("started", "svc.>"),
        ("failed", "svc.a", 1, 1000, 1000),
        ("failed", "svc.a", 2, 2000, 1000),
        ("failed", "svc.a", 3, 3000, 1000),
        ("failed", "svc.a", 4, 4000, 1000),
    ]
    rrig.send("svc.a", seq=7)  # no clock advance: the beat itself resumes the topic
    assert rrig.take() == [
        ("resumed", "svc.a", 4, 4500, 3500),
        ("received", "svc.a", 7, 4500),
    ]
    st = rrig.mon.status("svc.a")
    assert (st.state, st.missed, ms(st.last_seen)) == (State.ALIVE, 0, 4500)
    rrig.send("svc.a", seq=8)
    assert rrig.take() == [("received", "svc.a", 8, 4500)]
    # the next miss counts from the last beat: deadline 5.5
    assert rrig.advance(1.0) == []
    assert rrig.advance(0.001) == [("failed", "svc.a", 1, 5500, 5500)]


def test_allowed_misses_three() -> None:
    for r in make_rig(allowed_misses=3):
        r.mon.start()
        r.send("svc.a", seq=1)  # learned at 0.0, default period 1.0
        assert r.take() == [("started", "svc.>")]
        assert r.mon.status("svc.a").allowed_misses == 3
        assert r.advance(3.0) == []  # missed 1 and 2 (past 1.0 and 2.0) are not failures yet
        assert r.mon.status("svc.a").missed == 2
        assert r.mon.status("svc.a").state is State.ALIVE
        assert r.advance(0.001) == [("failed", "svc.a", 3, 3000, 3000)]
        assert r.advance(2.0) == [
            ("failed", "svc.a", 4, 4000, 3000),
            ("failed", "svc.a", 5, 5000, 3000),
        ]
        r.send("svc.a", seq=2)
        assert r.take() == [("resumed", "svc.a", 5, 5001, 2001)]


def test_a_beat_in_time_resets_the_count_before_allowed_misses() -> None:
    for r in make_rig(allowed_misses=3):
        r.mon.start()
        r.send("svc.a")
        assert r.take() == [("started", "svc.>")]
        for _ in range(5):
            assert r.advance(2.5) == []  # two misses, then a beat: never three in a row
            r.send("svc.a")
            assert r.mon.status("svc.a").missed == 0
        assert r.take() == []


def test_whole_sequence_from_start_to_stop(rrig: Rig) -> None:
    rrig.mon.expect("svc.a", period=0.5)
    rrig.mon.start()
    rrig.clock.advance(1.2)
    rrig.send("svc.a", seq=1)
    rrig.clock.advance(0.3)
    rrig.send("svc.a", seq=2)
    rrig.mon.stop()
    assert rrig.rec.take() == [  # stop() delivered everything before on_stopped
        ("started", "svc.>"),
        ("failed", "svc.a", 1, 500, 500),
        ("failed", "svc.a", 2, 1000, 500),
        ("resumed", "svc.a", 2, 1200, 700),
        ("received", "svc.a", 1, 1200),
        ("received", "svc.a", 2, 1500),
        ("stopped", "svc.>"),
    ]
    assert rrig.mon.status("svc.a").state is State.STOPPED


def test_received_carries_seq_and_latency(rrig: Rig) -> None:
    rrig.mon.start()
    rrig.take()
    rrig.send("svc.a", seq=41, sent_at=time.time() - 0.25)
    [ev] = rrig.rec.events if rrig.mon.drain() else []
    assert isinstance(ev, Received)
    assert ev.seq == 41
    assert ev.latency is not None and 0.2 < ev.latency < 5.0


def test_received_without_seq_has_seq_none(rrig: Rig) -> None:
    rrig.mon.start()
    rrig.take()
    rrig.broker.publish("svc.old", b"svc.old HEARTBEAT")
    assert rrig.take() == [("received", "svc.old", None, 0)]


# -- pause / resume ----------------------------------------------------------------------------


def test_pause_the_whole_monitor(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.expect("svc.b")
    rig.mon.start()
    assert sorted(rig.advance(1.5)) == [
        ("failed", "svc.a", 1, 1000, 1000),
        ("failed", "svc.b", 1, 1000, 1000),
        ("started", "svc.>"),
    ]
    assert rig.mon.pause()
    assert not rig.mon.pause()  # already paused
    assert rig.mon.paused
    assert rig.advance(10.0) == []  # no failures while paused
    assert {s.state for s in rig.mon.statuses()} == {State.PAUSED}
    rig.send("svc.a")  # beats are still recorded ...
    rig.send("svc.c")  # ... and new topics learned, paused
    assert ms(rig.mon.status("svc.a").last_seen) == 11_500
    assert rig.mon.status("svc.c").state is State.PAUSED
    assert rig.mon.counts()["PAUSED"] == 3
    rig.clock.advance(0.5)  # now 12.0
    assert rig.mon.resume()
    assert not rig.mon.resume()
    # svc.a failed before the pause and was heard during it: resumed, up to that beat
    assert rig.take() == [("resumed", "svc.a", 1, 11_500, 10_500)]
    states = {s.topic: s.state for s in rig.mon.statuses()}
    assert states == {"svc.a": State.ALIVE, "svc.b": State.FAILED, "svc.c": State.ALIVE}
    # each topic is due one period after the resume; svc.b, never heard, counts on
    assert rig.advance(1.0) == []
    assert sorted(rig.advance(0.001)) == [
        ("failed", "svc.a", 1, 13_000, 13_000),
        ("failed", "svc.b", 2, 13_000, 1000),
        ("failed", "svc.c", 1, 13_000, 13_000),
    ]


def test_pause_and_resume_one_topic(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.expect("svc.b")
    rig.mon.start()
    rig.take()
    assert rig.mon.pause("svc.a")
    assert not rig.mon.pause("svc.a")
    assert rig.advance(2.5) == [
        ("failed", "svc.b", 1, 1000, 1000),
        ("failed", "svc.b", 2, 2000, 1000),
    ]
    assert rig.mon.status("svc.a").state is State.PAUSED
    # the whole monitor paused and resumed: svc.a stays paused
    rig.mon.pause()
    rig.mon.resume()
    assert rig.mon.status("svc.a").state is State.PAUSED
    # svc.b was FAILED when paused and not heard: it counts on, one period after the resume
    assert rig.advance(3.0) == [
        ("failed", "svc.b", 3, 3500, 1000),
        ("failed", "svc.b", 4, 4500, 1000),
    ]
    assert rig.mon.resume("svc.a")  # at 5.5, never heard: due one period later
    assert not rig.mon.resume("svc.a")
    assert sorted(rig.advance(1.001)) == [
        ("failed", "svc.a", 1, 6500, 6500),
        ("failed", "svc.b", 5, 5500, 1000),
        ("failed", "svc.b", 6, 6500, 1000),
    ]
    with pytest.raises(KeyError, match=r"svc\.nope"):
        rig.mon.pause("svc.nope")


def test_a_failed_topic_that_recovers_while_paused_is_resumed_on_resume(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.expect("svc.b")
    rig.mon.start()
    assert sorted(rig.advance(2.5)) == [
        ("failed", "svc.a", 1, 1000, 1000),
        ("failed", "svc.a", 2, 2000, 1000),
        ("failed", "svc.b", 1, 1000, 1000),
        ("failed", "svc.b", 2, 2000, 1000),
        ("started", "svc.>"),
    ]
    assert rig.mon.pause("svc.a")
    rig.mon.pause()  # the whole monitor too: svc.b is paused while FAILED as well
    rig.clock.advance(1.0)
    rig.send("svc.a")  # 3.5: back while paused (svc.b stays silent)
    rig.clock.advance(1.0)
    rig.send("svc.a")
    assert rig.take() == []  # nothing while paused
    assert rig.mon.status("svc.a").state is State.PAUSED
    rig.clock.advance(0.5)  # 5.0
    rig.mon.resume()
    # svc.b was not heard: FAILED again, its count going on one period after the resume.
    st = rig.mon.status("svc.b")
    assert (st.state, st.missed, ms(st.failed_since)) == (State.FAILED, 2, 1000)
    assert rig.mon.resume("svc.a")
    # svc.a came back at 3.5: resumed, with the downtime up to that first beat.
    assert rig.take() == [("resumed", "svc.a", 2, 3500, 2500)]
    assert rig.mon.status("svc.a").state is State.ALIVE
    assert sorted(rig.advance(1.001)) == [
        ("failed", "svc.a", 1, 6000, 6000),
        ("failed", "svc.b", 3, 6000, 1000),
    ]


def test_a_topic_paused_before_start_is_paused_once_started(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.pause("svc.a")
    rig.mon.start()
    assert rig.mon.status("svc.a").state is State.PAUSED
    assert rig.advance(5.0) == [("started", "svc.>")]
    with pytest.raises(RuntimeError, match="not running"):
        HeartbeatMonitor(None, "x.>").pause()


def test_a_topic_resumed_while_stopped_is_watched_again_after_start(rig: Rig) -> None:
    # R1 F3: the detector keeps pauses across stop/start (issue 14 item 6), but resume(topic)
    # while stopped only told the monitor: the topic came back PAUSED for good, resume() said
    # False, and it never failed.
    rig.mon.expect("svc.a")
    rig.mon.expect("svc.b")
    rig.mon.start()
    rig.send("svc.a")
    assert rig.mon.pause("svc.a")
    assert rig.mon.pause("svc.b")
    rig.mon.stop()
    assert rig.mon.resume("svc.a")  # while stopped; svc.b stays paused
    rig.clock.advance(10.0)
    rig.take()
    rig.mon.start()  # at 10
    assert rig.mon.status("svc.a").state is State.ALIVE
    assert rig.mon.status("svc.b").state is State.PAUSED
    assert not rig.mon.resume("svc.a")
    assert rig.advance(2.5) == [
        ("started", "svc.>"),
        ("failed", "svc.a", 1, 11000, 11000),
        ("failed", "svc.a", 2, 12000, 11000),
    ]
    assert rig.mon.resume("svc.b")


def test_a_failed_topic_resumed_while_stopped_counts_on_after_start(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.start()
    assert rig.advance(1.5) == [("started", "svc.>"), ("failed", "svc.a", 1, 1000, 1000)]
    assert rig.mon.pause("svc.a")
    rig.mon.stop()
    assert rig.mon.resume("svc.a")
    rig.clock.advance(3.5)
    assert rig.take() == [("stopped", "svc.>")]
    rig.mon.start()  # at 5: FAILED as when paused, its count going on one period later
    st = rig.mon.status("svc.a")
    assert (st.state, st.missed, ms(st.failed_since)) == (State.FAILED, 1, 1000)
    assert rig.advance(1.001) == [("started", "svc.>"), ("failed", "svc.a", 2, 6000, 1000)]


def test_a_topic_paused_while_stopped_stays_paused_after_start(rig: Rig) -> None:
    rig.mon.expect("svc.a")
    rig.mon.start()
    rig.mon.stop()
    assert rig.mon.pause("svc.a")
    assert not rig.mon.pause("svc.a")
    rig.mon.start()
    assert rig.mon.status("svc.a").state is State.PAUSED
    assert rig.advance(5.0) == [("started", "svc.>"), ("stopped", "svc.>"), ("started", "svc.>")]
    assert rig.mon.resume("svc.a")
    assert rig.advance(1.001) == [("failed", "svc.a", 1, 6000, 6000)]


# -- topics learned from beats -----------------------------------------------------------------


def test_period_learned_from_the_beats(rig: Rig) -> None:
    rig.mon.start()
    rig.take()
    rig.send("svc.fast", seq=1, period=0.5)
    rig.send("svc.slow", seq=1, period=5.0)
    rig.broker.publish("svc.old", b"svc.old HEARTBEAT")  # no period: the monitor's default
    assert rig.mon.status("svc.fast").period == 0.5
    assert rig.mon.status("svc.slow").period == 5.0
    assert rig.mon.status("svc.old").period == 1.0
    assert rig.advance(0.501) == [("failed", "svc.fast", 1, 500, 500)]
    assert rig.mon.stats()["learned"] == 3


def test_a_beat_with_a_new_period_retunes_the_topic(rig: Rig) -> None:
    rig.mon.start()
    rig.take()
    rig.send("svc.a", period=0.5)
    rig.clock.advance(0.4)
    rig.send("svc.a", period=2.0)  # the publisher slowed down
    assert rig.mon.status("svc.a").period == 2.0
    assert rig.advance(2.0) == []
    assert rig.advance(0.001) == [("failed", "svc.a", 1, 2400, 2400)]
    rig.send("svc.a", period=0.25)
    assert rig.mon.status("svc.a").period == 0.25


def test_an_expected_period_is_not_changed_by_beats(rig: Rig) -> None:
    rig.mon.expect("svc.a", period=3.0)
    rig.mon.expect("svc.b")  # default period: learned from beats
    rig.mon.start()
    rig.send("svc.a", period=0.5)
    rig.send("svc.b", period=0.5)
    assert rig.mon.status("svc.a").period == 3.0
    assert rig.mon.status("svc.b").period == 0.5
    rig.mon.expect("svc.b", period=4.0, allowed_misses=2)  # changes a watched topic
    st = rig.mon.status("svc.b")
    assert (st.period, st.allowed_misses) == (4.0, 2)
    rig.send("svc.b", period=0.5)
    assert rig.mon.status("svc.b").period == 4.0


def test_legacy_text_beats(rrig: Rig) -> None:
    rrig.mon.expect("svc.old")
    rrig.mon.start()
    rrig.advance(1.5)
    rrig.broker.publish("svc.old", b"svc.old HEARTBEAT")
    rrig.broker.publish("svc.new", b"svc.new HEARTBEAT\n")  # learned, like JSON beats
    events = rrig.take()
    assert [e[:2] for e in events] == [
        ("resumed", "svc.old"),
        ("received", "svc.old"),
        ("received", "svc.new"),
    ]
    assert rrig.mon.status("svc.new").state is State.ALIVE
    assert rrig.mon.stats()["rejected"] == {}


def test_subscriber_watches_its_one_topic_from_start() -> None:
    clock = hw.ManualClock()
    broker = connect()
    rec = Recorder()
    sub = HeartbeatSubscriber(broker, "svc.a", period=0.5, listeners=[rec], clock=clock, grace=0.0)
    with sub:
        assert sub.topic == "svc.a"
        assert sub.status().state is State.PENDING
        clock.advance(0.6)
        broker.publish("svc.b", BeatCodec().encode(Beat("svc.b")))  # not its topic
        assert sub.drain()
        assert [summary(e) for e in rec.events] == [
            ("started", "svc.a"),
            ("failed", "svc.a", 1, 500, 500),
        ]
        assert len(sub) == 1
        assert "svc.b" not in sub
    assert summary(rec.events[-1]) == ("stopped", "svc.a")


# -- scale -------------------------------------------------------------------------------------


def test_ten_thousand_topics_hundred_silent_exact_failed_counts() -> None:
    for r in make_rig(allowed_misses=3, recorder=Recorder()):
        names = [f"svc.{i:05d}" for i in range(10_000)]
        silent = set(names[::100])
        r.mon.start()
        for name in names:  # learned from their first beat, through the broker
            r.send(name, seq=0, period=1.0)
        assert len(r.mon) == 10_000
        live = [r.mon.handle(n) for n in names if n not in silent]
        for _ in range(10):
            r.clock.advance(1.0)
            assert r.mon.beat_handles(live) == 9_900
        events = r.advance(0.001)
        assert events[0] == ("started", "svc.>")
        failed = events[1:]
        assert len(failed) == 100 * 8  # missed 3..10 for each silent topic
        by_topic: dict[str, list[int]] = {}
        for kind, topic, missed, _at, since in failed:
            assert kind == "failed"
            assert since == 3000
            by_topic.setdefault(topic, []).append(missed)
        assert set(by_topic) == silent
        assert all(counts == list(range(3, 11)) for counts in by_topic.values())
        assert r.mon.counts()["FAILED"] == 100
        for name in sorted(silent):
            r.send(name, seq=1)
        back = r.take()
        assert len(back) == 100
        assert {(k, m, d) for k, _t, m, _at, d in back} == {("resumed", 10, 7001)}
        assert r.mon.counts()["ALIVE"] == 10_000
        stats = r.mon.stats()
        assert (stats["failed"], stats["resumed"], stats["dropped"]) == (800, 100, 0)
        assert stats["learned"] == 10_000
