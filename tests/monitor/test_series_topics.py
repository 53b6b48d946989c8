"""The bounded selection behind the per-topic Prometheus series: ``series_topics(n)`` (review
17 finding 9: a scrape built one Python object per topic, O(topics), not O(n))."""

from __future__ import annotations

import pytest

import heartwire as hw


def _monitor(names: list[str], failing: set[str]) -> tuple[hw.HeartbeatMonitor, hw.ManualClock]:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, grace=0, clock=clock)
    mon.start()
    mon.beat_many(names)
    clock.advance(0.5)
    mon.beat_many([n for n in names if n not in failing])
    clock.advance(0.7)  # the failing ones missed their deadline at 1 s
    return mon, clock


def test_failed_topics_come_first_then_all_by_name_and_the_total_counts_every_topic() -> None:
    names = [f"svc.t{i:02d}" for i in range(30)][::-1]  # learned in reverse name order
    failing = {"svc.t29", "svc.t07", "svc.t15"}
    mon, _ = _monitor(names, failing)
    try:
        chosen, total = mon.series_topics(5)
        assert total == 30
        assert [s.topic for s in chosen] == ["svc.t07", "svc.t15", "svc.t29", "svc.t00", "svc.t01"]
        assert [s.state for s in chosen[:3]] == [hw.State.FAILED] * 3
        assert chosen[3] == mon.status("svc.t00")  # a full status, as statuses() gives
        chosen, total = mon.series_topics(2)  # fewer than the FAILED ones: FAILED only
        assert [s.topic for s in chosen] == ["svc.t07", "svc.t15"] and total == 30
        chosen, total = mon.series_topics(100)  # more than there are: all, in that order
        assert [s.topic for s in chosen] == sorted(failing) + sorted(set(names) - failing)
        assert mon.series_topics(0) == ([], 30)
    finally:
        mon.stop()


def test_removed_topics_are_neither_chosen_nor_counted() -> None:
    mon, _ = _monitor(["svc.a", "svc.b", "svc.c"], {"svc.b"})
    try:
        mon.remove("svc.b")
        mon.remove("svc.a")
        chosen, total = mon.series_topics(10)
        assert [s.topic for s in chosen] == ["svc.c"] and total == 1
    finally:
        mon.stop()


def test_a_negative_bound_is_refused_naming_it() -> None:
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0, clock=hw.ManualClock())
    with pytest.raises(ValueError, match=r"n must be an int >= 0, got -1"):
        mon.series_topics(-1)
    with pytest.raises(TypeError):
        mon.series_topics("3")  # type: ignore[arg-type]
