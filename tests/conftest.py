"""Shared fixtures: a detector on a manual clock with one event queue."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import heartwire as hw


@dataclass
class Rig:
    clock: hw.ManualClock
    det: hw.Detector
    events: hw.EventQueue

    def take(self) -> list[hw.Event]:
        """Every event produced so far (the manual clock produces them before advance returns)."""
        out: list[hw.Event] = []
        while batch := self.events.try_pop(100_000):
            out.extend(batch)
        return out


@pytest.fixture
def rig() -> Rig:
    clock = hw.ManualClock()
    det = hw.Detector(clock=clock, period=1.0, allowed_misses=1)
    return Rig(clock, det, det.subscribe(capacity=1 << 20))


def ms(t: float) -> int:
    """Seconds as whole milliseconds, for exact comparisons of event times."""
    return round(t * 1000)
