"""The core's port of the shard function (``_core.shard_of``, used by a shard queue's intake to
refuse a beat of another shard's topic, ``wrong_shard``) gives Python's
``heartwire.transport.shards.shard_of`` result for every name and shard count; and the intake's
``shard=(shards, k)`` on the Python path (``Intake.ingest``/``record``, for a body the native
reader leaves to Python) and on ``Routes.add``."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heartwire import _core
from heartwire._core import Detector, Intake, Routes
from heartwire.transport.shards import MAX_SHARDS, ShardLayout, shard_of

_SEGMENT = st.text(string.ascii_letters + string.digits + "-_:", min_size=1, max_size=12)
_TOPIC = st.lists(_SEGMENT, min_size=1, max_size=5).map(".".join)


def test_the_core_and_python_agree_on_many_names_and_shard_counts() -> None:
    rng = random.Random(18)
    alphabet = string.ascii_letters + string.digits + "-_:"
    names = [f"svc.{i}" for i in range(3000)]
    names += [
        ".".join(
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20)))
            for _ in range(rng.randint(1, 6))
        )
        for _ in range(3000)
    ]
    counts = [1, 2, 3, 4, 7, 16, 17, 64, 100, 1000, 4095, MAX_SHARDS]
    mismatches = [
        (name, n, _core.shard_of(name, n), shard_of(name, n))
        for name in names
        for n in counts
        if _core.shard_of(name, n) != shard_of(name, n)
    ]
    assert mismatches == [], mismatches[:5]
    assert _core.MAX_SHARDS == MAX_SHARDS


@settings(max_examples=500, deadline=None)
@given(_TOPIC, st.integers(1, MAX_SHARDS))
def test_the_core_and_python_agree_on_any_name(topic: str, shards: int) -> None:
    assert _core.shard_of(topic, shards) == shard_of(topic, shards)


@pytest.mark.parametrize("shards", [0, -1, MAX_SHARDS + 1])
def test_the_core_refuses_a_shard_count_out_of_range(shards: int) -> None:
    with pytest.raises(ValueError, match=f"shards must be between 1 and {MAX_SHARDS}, got"):
        _core.shard_of("svc.a", shards)


@pytest.fixture
def intake() -> Iterator[Intake]:
    det = Detector(period=5.0)
    intake = Intake(det, "svc.*", 5.0)
    intake.running = True
    yield intake
    det.stop()


LAYOUT = ShardLayout("g", 4)
OWN = next(f"svc.{i}" for i in range(100) if LAYOUT.shard_of(f"svc.{i}") == 1)
STRAY = next(f"svc.{i}" for i in range(100) if LAYOUT.shard_of(f"svc.{i}") == 3)


def test_ingest_and_record_refuse_a_beat_of_another_shard(intake: Intake) -> None:
    queue = (4, 1)
    body = json.dumps({"v": 1, "topic": STRAY}).encode()
    assert intake.ingest(body, None, shard=queue) is False
    assert intake.record(STRAY, shard=queue) is False
    assert intake.record(OWN, shard=queue) is True
    assert intake.ingest(json.dumps({"v": 1, "topic": OWN}).encode(), shard=queue) is True
    refused = intake.take_refusals()
    assert [(reason, count) for reason, _, count in refused] == [
        ("wrong_shard", 1),
        ("wrong_shard", 2),
    ]
    assert f"{STRAY!r} refused: its topic is in shard 3 of 4, not in shard 1" in refused[0][1]
    # Without a shard (a topic subscription), the same beat is taken.
    assert intake.record(STRAY) is True


@pytest.mark.parametrize("shard", [(0, 0), (4, 4), (4, -1), (MAX_SHARDS + 1, 0)])
def test_a_bad_shard_pair_names_it(intake: Intake, shard: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match=r"shard must be a pair \(shards, k\)"):
        intake.record(OWN, shard=shard)
    with pytest.raises(ValueError, match=r"shard must be a pair \(shards, k\)"):
        intake.ingest(b"{}", shard=shard)
    with pytest.raises(ValueError, match=r"shard must be a pair \(shards, k\)"):
        Routes().add("s1", intake, from_body=True, shard=shard)


def test_a_route_shard_needs_from_body(intake: Intake) -> None:
    routes = Routes()
    with pytest.raises(ValueError, match="shard is for a route with from_body=True"):
        routes.add("s1", intake, shard=(4, 1))
    assert len(routes) == 0
    routes.add("s1", intake, from_body=True, shard=(4, 1))
    assert len(routes) == 1
