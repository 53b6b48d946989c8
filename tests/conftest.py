"""Shared fixtures: a detector on a manual clock with one event queue; the SparkSession. The
``brokers`` marker on the tests that need the real brokers (their fixtures: tests/brokers.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import heartwire as hw

#: The fixtures of tests/brokers.py that bring the real STOMP brokers up.
BROKER_FIXTURES = frozenset({"brokers", "tls_broker"})


@pytest.hookimpl(tryfirst=True)  # before -m selects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``brokers`` every test that uses a broker fixture, however it asks for it (argument,
    ``usefixtures``, ``pytestmark``): ``pytest -m "not brokers"`` runs the rest."""
    for item in items:
        if BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.brokers)


@dataclass
class Rig:
    clock: hw.ManualClock
    det: hw.core.Detector
    events: hw.core.EventQueue

    def take(self) -> list[hw.core.Event]:
        """Every event produced so far (the manual clock produces them before advance returns)."""
        out: list[hw.core.Event] = []
        while batch := self.events.try_pop(100_000):
            out.extend(batch)
        return out


@pytest.fixture
def rig() -> Rig:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, allowed_misses=1)
    return Rig(clock, det, det.subscribe(capacity=1 << 20))


def ms(t: float) -> int:
    """Seconds as whole milliseconds, for exact comparisons of event times."""
    return round(t * 1000)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole run (test_spark, test_report); skips without
    Java. PySpark is imported inside, so this module loads without it."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java, which is not installed")
    from heartwire._spark_session import build_session

    session = build_session(
        "heartwire-tests",
        "local[2]",
        shuffle_partitions=2,
        parallelism=2,
        driver_memory="1g",
        force_python=True,  # the workers import heartwire from this venv, whatever the shell set
    )
    yield session
    session.stop()


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Things to stop or close at the end of the test, whatever happens (last first)."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        stop = getattr(thing, "stop", None) or thing.close
        with contextlib.suppress(Exception):
            stop()
