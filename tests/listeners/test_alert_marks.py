"""AlertListener and the alerting policy's marks (issue 17): silenced and suppressed events are
not published by default (as Alertmanager sends no silenced or inhibited alert), the alert held
back is published when the silence ends or the parent resumes, flapping is published; all of
it configurable. Manual clock, exact alert streams."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.transport.memory import MemoryBroker


class Alerts:
    """An AlertListener publishing through a ReliableSender to a consumer on a memory broker."""

    def __init__(self, broker: MemoryBroker, **options: Any) -> None:
        self.got: list[hw.ReceivedMessage] = []
        dest = f"/topic/alerts.{id(self)}"
        self.consumer = hw.Consumer(broker, dest, on_message=self.got.append).start()
        self.listener = hw.AlertListener(hw.ReliableSender(broker, dest), **options)

    def bodies(self, count: int) -> list[dict[str, Any]]:
        """The alerts received, once there are ``count`` of them (5 s at most)."""
        deadline = time.monotonic() + 5.0
        while len(self.got) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        bodies = [json.loads(m.body) for m in self.got]
        assert len(bodies) == count, f"expected {count} alerts, got {bodies}"
        return bodies


def brief(body: dict[str, Any]) -> tuple[Any, ...]:
    marks = tuple(k for k in ("silenced", "suppressed_by") if k in body)
    if body["alert"] == "flapping":
        return ("flapping", body["topic"], body["flapping"], body["at_monotonic"])
    return (body["alert"], body["topic"], body["at_monotonic"], *marks)


def test_silenced_and_suppressed_are_not_published_by_default_and_held_alerts_are() -> None:
    broker = MemoryBroker()
    clock = hw.ManualClock()
    pager = Alerts(broker)
    audit = Alerts(broker, include_silenced=True, include_suppressed=True)
    mon = hw.HeartbeatMonitor(
        broker, "svc.>", clock=clock, period=1.0, grace=0.0,
        listeners=[pager.listener, audit.listener],
    )  # fmt: skip
    for topic in ("svc.db", "svc.api", "svc.cache"):
        mon.expect(topic)
    mon.depends("svc.api", on="svc.db")
    mon.start()
    mon.silence("svc.cache", duration=1.5, reason="upgrade")
    clock.advance(1.2)  # all three fail at 1.0: db alerts, api is suppressed, cache silenced
    mon.beat("svc.db")  # db resumes at 1.2: api, still down, is released unsuppressed
    clock.advance(0.4)  # the silence ends at 1.5: cache, still down, is released
    mon.beat_many(["svc.api", "svc.cache"])  # both resume at 1.6, unmarked: they were alerted
    assert mon.drain(5.0)
    assert [brief(b) for b in pager.bodies(6)] == [
        ("failed", "svc.db", 1.0),
        ("resumed", "svc.db", 1.2),
        ("failed", "svc.api", 1.2),
        ("failed", "svc.cache", 1.5),
        ("resumed", "svc.api", 1.6),
        ("resumed", "svc.cache", 1.6),
    ]
    audit_got = [brief(b) for b in audit.bodies(8)]
    assert sorted(audit_got[:3]) == [
        ("failed", "svc.api", 1.0, "suppressed_by"),
        ("failed", "svc.cache", 1.0, "silenced"),
        ("failed", "svc.db", 1.0),
    ]
    assert audit_got[3:5] == [("resumed", "svc.db", 1.2), ("failed", "svc.api", 1.2)]
    marked = [b for b in audit.bodies(8) if "silenced" in b or "suppressed_by" in b]
    assert {(b["topic"], b.get("silenced"), b.get("suppressed_by")) for b in marked} == {
        ("svc.api", None, "svc.db"),
        ("svc.cache", True, None),
    }
    assert pager.listener.published == 6 and audit.listener.published == 8
    mon.stop()


def test_an_outage_inside_a_silence_publishes_nothing_and_its_resumed_neither() -> None:
    broker = MemoryBroker()
    clock = hw.ManualClock()
    pager = Alerts(broker)
    mon = hw.HeartbeatMonitor(
        broker, "svc.>", clock=clock, period=1.0, grace=0.0, listeners=[pager.listener]
    )
    mon.expect("svc.db")
    mon.start()
    mon.silence("svc.db", duration=10.0)
    clock.advance(2.5)  # failed at 1.0 and 2.0, silenced
    mon.beat("svc.db")  # resumed, silenced as its outage was
    assert mon.drain(5.0)
    assert mon.stats()["silenced"] == 3
    assert pager.listener.published == 0 and pager.got == []
    mon.stop()


def test_flapping_start_and_settle_are_published_unless_turned_off() -> None:
    broker = MemoryBroker()
    clock = hw.ManualClock()
    pager = Alerts(broker)
    quiet = Alerts(broker, flapping=False)
    mon = hw.HeartbeatMonitor(
        broker, "svc.>", clock=clock, period=1.0, grace=0.0,
        listeners=[pager.listener, quiet.listener], flap_threshold=2, flap_window=10.0,
    )  # fmt: skip
    mon.expect("svc.worker")
    mon.start()
    for n in range(3):  # three outages: down at n*1.5 + 1.0, back at n*1.5 + 1.5
        clock.set(n * 1.5 + 1.1)
        clock.set(n * 1.5 + 1.5)
        mon.beat("svc.worker")
    clock.set(16.0)  # down for good since 5.5 (held), settled at 15.5 with a failed
    assert mon.drain(5.0)
    got = pager.bodies(8)
    assert [brief(b) for b in got] == [
        ("failed", "svc.worker", 1.0),
        ("resumed", "svc.worker", 1.5),
        ("failed", "svc.worker", 2.5),
        ("resumed", "svc.worker", 3.0),
        ("failed", "svc.worker", 4.0),
        ("flapping", "svc.worker", True, 4.5),
        ("flapping", "svc.worker", False, 15.5),
        ("failed", "svc.worker", 15.5),
    ]
    flap = [b for b in got if b["alert"] == "flapping"]
    assert (flap[0]["count"], flap[1]["count"]) == (3, 0)
    assert [brief(b) for b in quiet.bodies(6)] == [brief(b) for b in got if b not in flap]
    mon.stop()


@pytest.mark.parametrize("name", ["include_silenced", "include_suppressed", "flapping"])
def test_options_must_be_bools(name: str) -> None:
    with pytest.raises(TypeError, match=f"{name} must be a bool, got int 1"):
        hw.AlertListener(hw.ReliableSender(MemoryBroker(), "/topic/a"), **{name: 1})
