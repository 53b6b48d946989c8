"""Detector.adopt / adopt_many / marks (rust/detector/adopt.rs) from Python: the columns (lists,
Arrow, NumPy), the exact events under the ManualClock, and bad input refused naming the
argument and row with nothing adopted. The semantics case by case are in the Rust tests
(rust/detector/tests/adopt.rs) and the monitor's (tests/monitor/test_monitor_adopt.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from heartwire._core import Detector, ManualClock


def _rig() -> tuple[ManualClock, Detector, Any]:
    clock = ManualClock(10.0)
    det = Detector(clock=clock, max_local_pause=None)
    return clock, det, det.subscribe()


def _events(q: Any) -> list[tuple[Any, ...]]:
    out = []
    for e in q.pop(timeout=0):
        t = e.since if e.kind == "failed" else e.downtime
        out.append((e.kind, e.topic, e.missed, round(e.at * 1000), round(t * 1000)))
    return out


def test_adopt_one_topic_fresh_or_failed() -> None:
    clock, det, q = _rig()
    a = det.adopt("a")
    b = det.adopt("b", since=4.0, missed=3, period=2.0)
    assert (det.handle("a"), det.handle("b")) == (a, b)
    clock.advance(1.001)
    assert _events(q) == [("failed", "a", 1, 11000, 11000)]
    clock.advance(1.0)
    assert sorted(_events(q)) == [
        ("failed", "a", 2, 12000, 11000),
        ("failed", "b", 4, 12000, 4000),
    ]
    det.beat("b")
    assert _events(q) == [("resumed", "b", 4, 12001, 8001)]


@pytest.mark.parametrize(
    "columns",
    [
        lambda: {
            "names": ["a", "b", "c"],
            "since": [None, 4.0, math.nan],
            "missed": [None, 3, None],
        },
        lambda: {
            "names": pa.array(["a", "b", "c"]),
            "since": pa.array([None, 4.0, None]),
            "missed": pa.array([None, 3, None], pa.int64()),
        },
        lambda: {
            "names": ["a", "b", "c"],
            "since": np.array([math.nan, 4.0, math.nan]),
            "missed": np.array([1, 3, 1]),
        },
    ],
    ids=["lists", "arrow", "numpy"],
)
def test_adopt_many_by_columns(columns: Any) -> None:
    clock, det, q = _rig()
    cols = columns()
    handles = det.adopt_many(cols.pop("names"), **cols)
    assert handles == [det.handle(n) for n in ("a", "b", "c")]
    assert _events(q) == []
    clock.advance(1.001)
    assert sorted(_events(q)) == [
        ("failed", "a", 1, 11000, 11000),
        ("failed", "b", 4, 11000, 4000),
        ("failed", "c", 1, 11000, 11000),
    ]


def test_marks_lists_what_listeners_were_told() -> None:
    clock, det, _ = _rig()
    assert det.marks() == []  # no policy: every FAILED topic is alerted
    det.depends("svc.>", "db")
    det.adopt_many(
        ["db", "svc.a", "svc.b"],
        since=[5.0, 6.0, None],
        alerted=[True, False, None],
        suppressed_by=[None, "db", None],
    )
    assert det.marks() == [("svc.a", False, False, "db", False)]
    clock.advance(1.001)
    # svc.a still only told suppressed; svc.b failed at 11 while db is down: suppressed too.
    assert det.marks() == [
        ("svc.a", False, False, "db", False),
        ("svc.b", False, False, "db", False),
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"since": [1.0]}, ValueError, "since has 1 items, names 2"),
        ({"since": "ab"}, TypeError, "since must be a sequence .* got str"),
        ({"since": [None, "x"]}, TypeError, r"since\[1\] has the wrong type: str"),
        ({"since": 3}, TypeError, "since must be a sequence"),
        (
            {"since": [None, -1.0]},
            ValueError,
            r"since\[1\] must be a finite number of seconds >= 0",
        ),
        (
            {"since": [None, 1.0], "missed": [None, 0]},
            ValueError,
            r"missed\[1\] must be an int in \[1, 4294967295\]",
        ),
        (
            {"since": [None, 11.0]},
            ValueError,
            r"topics\[1\]: \"b\": since \(11000000000 ns\) is after",
        ),
        (
            {"since": [None, 1.0], "suppressed_by": [None, "x.>"]},
            ValueError,
            "suppressed_by must be a topic name",
        ),
        (
            {"period": [None, 0.0]},
            ValueError,
            r"period\[1\] must be a finite number of seconds > 0",
        ),
        ({"alerted": [None, "yes"]}, TypeError, r"alerted\[1\] has the wrong type"),
    ],
)
def test_bad_columns_raise_naming_the_row_and_adopt_nothing(
    kwargs: dict[str, Any], error: type[Exception], text: str
) -> None:
    _, det, _ = _rig()
    with pytest.raises(error, match=text):
        det.adopt_many(["a", "b"], **kwargs)
    assert len(det) == 0


def test_bad_single_adopt() -> None:
    _, det, _ = _rig()
    with pytest.raises(ValueError, match="missed must be an int in"):
        det.adopt("a", since=1.0, missed=0)
    with pytest.raises(ValueError, match="since must be a finite number of seconds >= 0, got NaN"):
        det.adopt("a", since=math.nan)
    with pytest.raises(ValueError, match="names holds 1 null"):
        det.adopt_many(pa.array(["a", None]))
    det.add("p")
    det.pause("p")
    with pytest.raises(ValueError, match='topics\\[0\\]: "p" is paused'):
        det.adopt("p", since=1.0)
    det.stop()
    with pytest.raises(ValueError, match="while the detector is stopped"):
        det.adopt("x")
    assert len(det) == 1
