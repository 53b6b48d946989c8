"""Every event of the design's semantics, exactly, under the manual clock."""

from __future__ import annotations

import pytest

import heartwire as hw
from tests.conftest import Rig, ms


def summary(events: list[hw.core.Event]) -> list[tuple[str, str, int, int]]:
    return [(e.kind, e.topic, e.missed, ms(e.at)) for e in events]


def test_never_heard_topic_fails_one_period_after_it_is_expected(rig: Rig) -> None:
    rig.det.add("svc.a")
    rig.clock.advance(1.0)  # exactly at the deadline: still on time
    assert rig.take() == []
    assert rig.det.status("svc.a").state == "PENDING"
    rig.clock.advance(0.001)
    [ev] = rig.take()
    assert (ev.kind, ev.topic, ev.missed, ms(ev.at), ms(ev.since)) == (
        "failed",
        "svc.a",
        1,
        1000,
        1000,
    )
    st = rig.det.status("svc.a")
    assert (st.state, st.missed, st.last_seen, ms(st.failed_since)) == ("FAILED", 1, None, 1000)


def test_failed_repeats_each_period_then_resumed_at_once_on_the_beat(rig: Rig) -> None:
    rig.det.add("svc.a", period=0.5, allowed_misses=2, now=0.0)
    rig.clock.advance(2.1)
    assert summary(rig.take()) == [
        ("failed", "svc.a", 2, 1000),
        ("failed", "svc.a", 3, 1500),
        ("failed", "svc.a", 4, 2000),
    ]
    assert rig.det.beat("svc.a")
    [ev] = rig.take()  # no advance needed: the beat itself resumes the topic
    assert (ev.kind, ev.missed, ms(ev.at), ms(ev.downtime)) == ("resumed", 4, 2100, 1100)
    assert rig.det.status("svc.a").state == "ALIVE"
    rig.clock.advance(1.0)  # two more misses from the beat at 2.1: 2.6 and 3.1 (not yet past)
    assert rig.take() == []
    rig.clock.advance(0.001)
    assert summary(rig.take()) == [("failed", "svc.a", 2, 3100)]


def test_pause_and_resume(rig: Rig) -> None:
    h = rig.det.add("svc.a")
    assert rig.det.pause(h)
    rig.clock.advance(10)
    assert rig.take() == []
    assert rig.det.beat(h)  # recorded while paused
    assert rig.det.status(h).state == "PAUSED"
    assert ms(rig.det.status(h).last_seen) == 10_000
    assert rig.det.resume("svc.a")
    rig.clock.advance(1.001)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 11_000)]


def test_remove_and_readd(rig: Rig) -> None:
    h = rig.det.add("svc.a")
    rig.det.remove("svc.a")
    assert "svc.a" not in rig.det
    assert rig.det.name(h) == "svc.a"
    assert not rig.det.beat(h)
    assert rig.det.stats()["refused"] == 1
    with pytest.raises(KeyError, match=r"svc\.a"):
        rig.det.status("svc.a")
    assert rig.det.add("svc.a") != h


def test_period_change_at_run_time(rig: Rig) -> None:
    rig.det.add("svc.a", period=10.0)
    rig.clock.advance(1.0)
    rig.det.set_period("svc.a", 0.25)
    rig.clock.advance(0.251)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 1250)]
    assert rig.det.status("svc.a").period == 0.25


def test_stop_refuses_beats_and_start_rearms(rig: Rig) -> None:
    rig.det.add("svc.a")
    rig.det.stop()
    assert not rig.det.running
    assert not rig.det.beat("svc.a")
    rig.clock.advance(5)
    assert rig.take() == []
    assert rig.det.counts()["STOPPED"] == 1
    rig.det.start()
    assert rig.det.running
    rig.clock.advance(1.001)
    assert summary(rig.take()) == [("failed", "svc.a", 1, 6000)]


def test_received_events_for_those_who_ask(rig: Rig) -> None:
    every = rig.det.subscribe(received=True)
    rig.det.add("svc.a")
    rig.clock.advance(1.5)
    assert rig.det.beat("svc.a", seq=7, latency=0.004)
    kinds = [(e.kind, e.seq, e.latency) for e in every.try_pop()]
    assert kinds == [("failed", None, None), ("resumed", None, None), ("received", 7, 0.004)]
    assert [e.kind for e in rig.take()] == ["failed", "resumed"]
    assert rig.det.unsubscribe(every)
    assert every.closed


def test_phi_topic_learns_and_reports_phi(rig: Rig) -> None:
    rig.det.add("jittery", phi=hw.core.Phi(threshold=8.0, acceptable_pause=0.0))
    for k in range(50):
        rig.clock.advance(0.9 + 0.05 * (k % 5))
        rig.det.beat("jittery")
    assert rig.take() == []
    assert rig.det.status("jittery").phi < 1.0
    rig.clock.advance(30)
    [first, *_] = rig.take()
    assert first.kind == "failed" and first.missed == 1
    # With ~1 s beats and a 0.1 s std-dev floor, suspicion comes a little after 1.2 s of silence.
    assert 1.1 < first.at - rig.det.status("jittery").last_seen < 2.5
    rig.det.configure("jittery", phi=False)
    assert rig.det.status("jittery").phi is None


def test_auto_add_learns_new_topics_from_beats(rig: Rig) -> None:
    rig.det.auto_add = True
    assert rig.det.beat("svc.new")
    assert rig.det.status("svc.new").state == "ALIVE"
    rig.det.auto_add = False
    assert not rig.det.beat("svc.other")
    assert rig.det.stats()["unknown"] == 1


def test_ten_thousand_topics_hundred_silent_exact_counts(rig: Rig) -> None:
    names = [f"svc.{i:05d}" for i in range(10_000)]
    handles = rig.det.add_many(names, allowed_misses=3)
    silent = set(names[::100])
    live = [h for n, h in zip(names, handles, strict=False) if n not in silent]
    rig.det.beat_handles(handles)
    for _ in range(10):
        rig.clock.advance(1.0)
        assert rig.det.beat_handles(live) == 9_900
    rig.clock.advance(0.001)
    events = rig.take()
    assert len(events) == 100 * 8  # missed 3..10 for each silent topic
    by_topic: dict[str, list[int]] = {}
    for ev in events:
        assert ev.kind == "failed" and ms(ev.since) == 3000
        by_topic.setdefault(ev.topic, []).append(ev.missed)
    assert set(by_topic) == silent
    assert all(counts == list(range(3, 11)) for counts in by_topic.values())
    assert rig.det.counts()["FAILED"] == 100
    assert rig.det.beat_many(sorted(silent)) == 100
    back = rig.take()
    assert len(back) == 100
    assert {(e.kind, e.missed, ms(e.downtime)) for e in back} == {("resumed", 10, 7001)}
    assert rig.det.counts()["ALIVE"] == 10_000
    stats = rig.det.stats()
    assert (stats["failed"], stats["resumed"], stats["unknown"]) == (800, 100, 0)
