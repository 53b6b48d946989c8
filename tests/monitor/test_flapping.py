"""Flapping under the manual clock: the exact event stream as a topic starts flapping, is held
back, and settles; flap_hold=False; the constructor's checks."""

from __future__ import annotations

from typing import Any

import pytest

import heartwire as hw
from heartwire.events import EventBatch, Failed, Flapping, Resumed
from tests.monitor.test_monitor_semantics import Recorder, make_rig, ms


class FlapRecorder(Recorder):
    def on_flapping(self, event: Flapping) -> None:
        self.events.append(event)

    def take(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for e in self.events:
            if isinstance(e, Flapping):
                out.append(("flapping", e.topic, e.flapping, e.count, ms(e.at)))
            elif isinstance(e, Failed | Resumed):
                kind = "failed" if isinstance(e, Failed) else "resumed"
                out.append((kind, e.topic, e.missed, ms(e.at)))
        self.events.clear()
        return out


class Batches(hw.SubscriberListener):
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def on_events(self, batch: EventBatch) -> None:
        self.kinds.extend(EventBatch.KINDS[k] for k in batch.kinds.tolist())


def flap(r: Any, cycles: int, start: float = 0.0) -> None:
    """``cycles`` outages of one period: down at start + n*1.5 + 1.0, back at + 1.5."""
    for n in range(cycles):
        r.clock.set(start + n * 1.5 + 1.1)
        r.clock.set(start + n * 1.5 + 1.5)
        r.send("svc.a")


def test_flapping_starts_holds_back_and_settles_with_the_topic_down() -> None:
    batches = Batches()
    for r in make_rig(recorder=FlapRecorder(), flap_threshold=2, flap_window=10.0):
        r.mon.add_listener(batches)
        r.mon.expect("svc.a")
        r.mon.start()
        flap(r, 3)
        assert r.take() == [
            ("failed", "svc.a", 1, 1000),
            ("resumed", "svc.a", 1, 1500),
            ("failed", "svc.a", 1, 2500),
            ("resumed", "svc.a", 1, 3000),
            ("failed", "svc.a", 1, 4000),
            ("flapping", "svc.a", True, 3, 4500),  # its resumed is held back
        ]
        # Down for good from 5.5: held back while it flaps; settled 10 s after that
        # transition, then its failure (the deadline at 15.5 itself) is delivered.
        r.clock.set(16.0)
        assert r.take() == [
            ("flapping", "svc.a", False, 0, 15500),
            ("failed", "svc.a", 11, 15500),
        ]
        assert r.mon.stats()["held"] == 11  # the resumed at 4.5 and the failed at 5.5 .. 14.5
        assert "flapping" in batches.kinds  # the batch path carries it too


def test_without_hold_every_event_is_delivered_besides_the_flapping_ones() -> None:
    for r in make_rig(recorder=FlapRecorder(), flap_threshold=1, flap_window=10.0, flap_hold=False):
        r.mon.expect("svc.a")
        r.mon.start()
        flap(r, 2)
        assert r.take() == [
            ("failed", "svc.a", 1, 1000),
            ("resumed", "svc.a", 1, 1500),
            ("failed", "svc.a", 1, 2500),
            ("resumed", "svc.a", 1, 3000),
            ("flapping", "svc.a", True, 2, 3000),
        ]
        for tenth in range(35, 131, 5):  # alive since 3.0, beating every 0.5 s
            r.clock.set(tenth / 10)
            r.send("svc.a")
        assert r.take() == [("flapping", "svc.a", False, 0, 13000)]  # nothing to add
        assert r.mon.stats()["held"] == 0


def test_flap_settings_are_checked() -> None:
    broker = hw.connect()
    try:
        with pytest.raises(ValueError, match="together"):
            hw.HeartbeatMonitor(broker, "svc.>", flap_threshold=3)
        with pytest.raises(ValueError, match="flap_threshold"):
            hw.HeartbeatMonitor(broker, "svc.>", flap_threshold=0, flap_window=5.0)
        with pytest.raises(ValueError, match="flap_window"):
            hw.HeartbeatMonitor(broker, "svc.>", flap_threshold=3, flap_window=-1.0)
        mon = hw.HeartbeatMonitor(broker, "svc.>", flap_threshold=3, flap_window=60.0)
        assert mon.detector.flapping() == (3, 60.0, True)
        assert hw.HeartbeatMonitor(broker, "svc.>").detector.flapping()[0] == 0
    finally:
        broker.close()
