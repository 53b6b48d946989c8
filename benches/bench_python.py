"""Python-side beat throughput at one million topics, against plain-Python baselines.

Run (see benches/README.md; needs a release build of the extension)::

    .venv/bin/python -m pytest benches/bench_python.py --benchmark-only

Every batch benchmark beats all 1,000,000 topics in one call; the single-call benchmarks make
100,000 calls. The detector runs on a ManualClock (no driver thread), so only the beat path is
measured.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

import heartwire

N = 1_000_000
SINGLE = 100_000
ROUNDS = {"rounds": 3, "iterations": 1, "warmup_rounds": 1}


def topic_name(i: int) -> str:
    return f"svc.region-{i % 64:02d}.host-{i:06d}"


class Fleet:
    """One detector with N topics, and the same topics in every input form."""

    def __init__(self) -> None:
        self.names: list[str] = [topic_name(i) for i in range(N)]
        self.det = heartwire.core.Detector(clock=heartwire.ManualClock())
        self.handles: list[int] = self.det.add_many(self.names)
        assert len(self.handles) == N
        self.np_handles = np.asarray(self.handles, dtype=np.uint32)
        self.arrow_names = pa.array(self.names, type=pa.string())
        self.single_handles = self.handles[:SINGLE]
        self.single_names = self.names[:SINGLE]


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet()


class PureMonitor:
    """What a user might write instead: last-seen times in a dict, plus a failed set."""

    def __init__(self, names: list[str]) -> None:
        self.last_seen: dict[str, float] = dict.fromkeys(names, 0.0)
        self.failed: set[str] = set()

    def beat(self, name: str) -> bool:
        now = time.monotonic()
        if name not in self.last_seen:
            return False
        if name in self.failed:  # the state check: a beat ends an outage
            self.failed.discard(name)
        self.last_seen[name] = now
        return True


# ----- batches: all 1M topics per call ------------------------------------------------------


@pytest.mark.benchmark(group="batch-1M")
def test_beat_handles_numpy(benchmark, fleet: Fleet) -> None:
    recorded = benchmark.pedantic(fleet.det.beat_handles, args=(fleet.np_handles,), **ROUNDS)
    assert recorded == N


@pytest.mark.benchmark(group="batch-1M")
def test_beat_many_arrow(benchmark, fleet: Fleet) -> None:
    recorded = benchmark.pedantic(fleet.det.beat_many, args=(fleet.arrow_names,), **ROUNDS)
    assert recorded == N


@pytest.mark.benchmark(group="batch-1M")
def test_beat_many_list(benchmark, fleet: Fleet) -> None:
    recorded = benchmark.pedantic(fleet.det.beat_many, args=(fleet.names,), **ROUNDS)
    assert recorded == N


@pytest.mark.benchmark(group="batch-1M")
def test_baseline_dict_loop(benchmark, fleet: Fleet) -> None:
    """The cheapest honest pure-Python monitor: one clock read, one dict store per name."""
    last_seen = dict.fromkeys(fleet.names, 0.0)
    names = fleet.names

    def beat_all() -> None:
        now = time.monotonic()
        for n in names:
            last_seen[n] = now

    benchmark.pedantic(beat_all, **ROUNDS)
    assert len(last_seen) == N


# ----- single calls: 100k calls, one beat each ----------------------------------------------


@pytest.mark.benchmark(group="single-100k")
def test_beat_single_handle(benchmark, fleet: Fleet) -> None:
    det, handles = fleet.det, fleet.single_handles

    def beat_each() -> None:
        for h in handles:
            det.beat(h)

    before = det.stats()["beats"]
    benchmark.pedantic(beat_each, **ROUNDS)
    assert det.stats()["beats"] - before == SINGLE * (ROUNDS["rounds"] + ROUNDS["warmup_rounds"])


@pytest.mark.benchmark(group="single-100k")
def test_baseline_pure_python_beat(benchmark, fleet: Fleet) -> None:
    pure, names = PureMonitor(fleet.names), fleet.single_names

    def beat_each() -> None:
        for n in names:
            pure.beat(n)

    benchmark.pedantic(beat_each, **ROUNDS)
    assert pure.last_seen[names[-1]] > 0.0
