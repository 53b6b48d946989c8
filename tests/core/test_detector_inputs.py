"""Batch inputs in every accepted form, and precise errors for bad input."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

import heartwire as hw
from tests.conftest import Rig

NAMES = ["svc.a", "svc.b", "svc.c"]


@pytest.fixture
def three(rig: Rig) -> Rig:
    rig.det.add_many(NAMES)
    return rig


@pytest.mark.parametrize(
    "make",
    [
        list,
        tuple,
        lambda names: (n for n in names),
        lambda names: np.array(names),
        lambda names: np.array(names, dtype=object),
        pa.array,
        lambda names: pa.array(names, pa.large_string()),
        lambda names: pa.array(names, pa.string_view()),
        lambda names: pa.chunked_array([names[:1], names[1:]]),
    ],
    ids=[
        "list",
        "tuple",
        "generator",
        "numpy-U",
        "numpy-object",
        "arrow",
        "arrow-large",
        "arrow-view",
        "arrow-chunked",
    ],
)
def test_beat_many_accepts_every_name_container(three: Rig, make) -> None:
    three.clock.advance(0.5)
    assert three.det.beat_many(make([*NAMES, "svc.unknown"])) == 3
    assert three.det.stats()["unknown"] == 1
    assert all(three.det.status(n).last_seen == 0.5 for n in NAMES)


def test_arrow_nulls_are_counted_not_recorded(three: Rig) -> None:
    assert three.det.beat_many(pa.array(["svc.a", None, "svc.b"])) == 2
    assert three.det.stats()["unknown"] == 1


@pytest.mark.parametrize(
    "make",
    [
        list,
        lambda hs: np.array(hs, dtype=np.int32),
        lambda hs: np.array(hs, dtype=np.int64),
        lambda hs: np.array(hs, dtype=np.uint32),
        lambda hs: np.array(hs, dtype=np.uint64),
        lambda hs: pa.array(hs, pa.uint32()),
        lambda hs: pa.array(hs, pa.int64()),
    ],
    ids=["list", "np-int32", "np-int64", "np-uint32", "np-uint64", "arrow-uint32", "arrow-int64"],
)
def test_beat_handles_accepts_every_integer_container(three: Rig, make) -> None:
    handles = [three.det.handle(n) for n in NAMES]
    three.clock.advance(0.25)
    assert three.det.beat_handles(make([*handles, 999])) == 3
    assert three.det.stats()["unknown"] == 1
    assert all(three.det.status(h).last_seen == 0.25 for h in handles)


def test_bad_handles_are_counted_as_unknown(three: Rig) -> None:
    assert three.det.beat_handles([-1, 2**40]) == 0
    assert three.det.beat_handles(pa.array([0, None], pa.int64())) == 1
    assert three.det.stats()["unknown"] == 3


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda d: d.beat_many(["svc.a", 3]), TypeError, r"names\[1\] must be str, got int"),
        (lambda d: d.beat_many("svc.a"), TypeError, "single str"),
        (lambda d: d.beat_many(42), TypeError, "got int"),
        (lambda d: d.beat_many(pa.array([1, 2])), TypeError, "Arrow string array"),
        (lambda d: d.beat_handles(["x"]), ValueError, r"handles\[0\] must be an int, got str"),
        (lambda d: d.beat_handles(np.array([1.5])), TypeError, "dtype float64"),
        (lambda d: d.beat_handles(pa.array(["a"])), TypeError, "Arrow integer array"),
        (lambda d: d.beat(1.5), TypeError, "str name or an int handle"),
        (lambda d: d.add("x", period=0), ValueError, "period must be .* > 0, got 0"),
        (lambda d: d.add("x", period=-1.0), ValueError, "period .* got -1"),
        (lambda d: d.add("x", period=math.nan), ValueError, "period .* got NaN"),
        (lambda d: d.add("x", period=math.inf), ValueError, "period .* got inf"),
        (lambda d: d.add("x", allowed_misses=0), ValueError, "allowed_misses must be >= 1, got 0"),
        (lambda d: d.add(""), ValueError, "must not be empty"),
        (lambda d: d.add("x" * (hw.core.MAX_NAME_LEN + 1)), ValueError, "65537 bytes"),
        (lambda d: d.beat("svc.a", now=-1.0), ValueError, "now must be .* >= 0, got -1"),
        (lambda d: d.beat("svc.a", latency=math.nan), ValueError, "latency"),
        (lambda d: d.subscribe(overflow="sometimes"), ValueError, "sometimes.*drop-oldest"),
        (lambda d: d.subscribe(capacity=0), ValueError, "capacity must be >= 1, got 0"),
        (lambda d: d.status(12345), KeyError, "12345"),
        (lambda d: d.configure("svc.a", phi="yes"), TypeError, "phi must be a Phi or False"),
        (lambda d: hw.core.Phi(threshold=math.nan), ValueError, "threshold"),
        (lambda d: hw.core.Phi(max_samples=0), ValueError, "max_samples"),
        (lambda d: hw.core.Detector(period=0.0), ValueError, "period"),
        (lambda d: hw.core.Detector(tick=-1.0), ValueError, "tick"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(three: Rig, call, exc, message) -> None:
    with pytest.raises(exc, match=message):
        call(three.det)


def test_bad_batches_record_nothing(three: Rig) -> None:
    with pytest.raises(TypeError):
        three.det.beat_many(["svc.a", None])
    assert three.det.stats()["beats"] == 0


def test_manual_clock_only_moves_forward() -> None:
    clock = hw.ManualClock(start=10.0)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.set(9.0)
    with pytest.raises(ValueError, match="seconds must be"):
        clock.advance(-1.0)
    assert clock.now() == 10.0
    assert clock.set(12.5) == 12.5
