"""``Groups`` remembers only the prefixes with a label of their own (review 17: it kept every
prefix ever seen, so its memory grew without bound under topic churn and the
``heartwire_groups_overflowed`` gauge only ever rose)."""

from __future__ import annotations

import pytest

import heartwire as hw
from heartwire.tally import OTHER, Groups


def test_prefixes_past_max_groups_are_other_and_not_remembered() -> None:
    groups = Groups(depth=1, max_groups=3)
    assert [groups.label(p) for p in ("a", "b", "a", "c")] == ["a", "b", "a", "c"]
    for i in range(10_000):  # churn: a new prefix each time
        assert groups.label(f"x{i}") == OTHER
    assert groups._own == {"a", "b", "c"}  # bounded by max_groups, whatever was seen
    assert groups.of("b.svc.main") == "b" and groups.of("zz.main") == OTHER
    assert groups.owns("a") and not groups.owns("x1")
    none = Groups(max_groups=0)
    assert none.label("a") == OTHER and not none.owns("a")


def test_the_overflowed_gauge_follows_the_topics_watched_now() -> None:
    prom = pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from heartwire.metrics import collector

    def overflowed() -> float:
        text = prom.generate_latest(registry).decode()
        (value,) = (
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "heartwire_groups_overflowed"
        )
        return value

    mon = hw.HeartbeatMonitor(None, ">", period=1.0, clock=hw.ManualClock(), max_groups=2)
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(collector(mon))
    mon.start()
    try:
        mon.beat_many(["a.x", "b.x", "c.x", "d.x", "d.y"])
        assert overflowed() == 2  # c and d, under "other"
        mon.remove("c.x")
        assert overflowed() == 1  # only d now
        mon.remove("d.x")
        mon.remove("d.y")
        assert overflowed() == 0
        mon.beat("e.x")  # a and b keep their labels: e is "other"
        assert overflowed() == 1
    finally:
        mon.stop()
