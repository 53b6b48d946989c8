"""Topics under ``_hw.`` (heartwire's own: control messages, keep-alive pings) are never taken
for beats, whatever the monitor's pattern (docs/silences.md): not off the broker, and not
through the API either (second review of issue 17, finding 4: ``mon.beat("_hw.control")`` and
``beat_many(["_hw.ping"])`` recorded topics, ``expect`` watched one). Refused and counted
(``bad_topic``) as a beat's other faults are; ``expect`` raises."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import heartwire as hw
from tests.monitor.test_monitor_semantics import Rig, make_rig


@pytest.fixture
def wide() -> Iterator[Rig]:
    yield from make_rig(pattern=">")


def test_beats_for_reserved_topics_are_refused_and_counted(wide: Rig) -> None:
    pa = pytest.importorskip("pyarrow")
    wide.mon.start()
    wide.take()
    assert wide.mon.beat("_hw.control") is False
    assert wide.mon.beat_many(["_hw.ping", "svc.a", "_hw.keepalive.x"]) == 1
    assert wide.mon.beat_many(pa.array(["_hw.arrow", "svc.b"])) == 1
    assert sorted(s.topic for s in wide.mon.statuses()) == ["svc.a", "svc.b"]
    assert "_hw.control" not in wide.mon
    assert wide.mon.stats()["rejected"] == {"bad_topic": 4}
    assert wide.mon.stats()["learned"] == 2
    assert wide.take() == [("exception", "bad_topic")] * 4


def test_the_refusal_names_the_topic_and_why(wide: Rig) -> None:
    details: list[str] = []

    class Errors(hw.SubscriberListener):
        def on_exception(self, event: hw.ExceptionEvent) -> None:
            details.append(event.detail or "")

    wide.mon.add_listener(Errors())
    wide.mon.start()
    assert wide.mon.beat("_hw.control") is False
    assert wide.mon.drain(5.0)
    assert len(details) == 1 and "'_hw.control'" in details[0] and "_hw." in details[0], details


def test_expect_refuses_a_reserved_topic(wide: Rig) -> None:
    with pytest.raises(ValueError, match=r"_hw\.control.*heartwire's own"):
        wide.mon.expect("_hw.control")
    assert "_hw.control" not in wide.mon
    wide.mon.expect("svc._hw")  # only the prefix is reserved
    assert "svc._hw" in wide.mon
