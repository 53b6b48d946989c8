"""Names reach the core as borrowed UTF-8 (abi3 for 3.10): every way in finds the same topic.

A name's UTF-8 is read from the ``str`` itself (ASCII) or from the copy it caches (anything
else); these tests hold the non-ASCII cases, ``str`` subclasses, and names with no UTF-8 form.
"""

from __future__ import annotations

import gc
import threading

import pyarrow as pa
import pytest

import heartwire as hw
from tests.conftest import Rig

WIDE = ["svc.ascii", "svc.zürich", "svc.東京", "svc.\U0001f493", "svc." + "é" * 300]


class Name(str):
    """A ``str`` subclass (accepted like a ``str``)."""


def test_non_ascii_names_round_trip_through_every_entry(rig: Rig) -> None:
    handles = rig.det.add_many(WIDE)
    assert [rig.det.handle(n) for n in WIDE] == handles
    assert [rig.det.name(h) for h in handles] == WIDE
    assert all(n in rig.det for n in WIDE)
    rig.clock.advance(0.25)
    assert rig.det.beat(WIDE[1])
    assert rig.det.beat(Name(WIDE[2]))
    rig.clock.advance(0.25)
    # A list, a generator of str subclasses, and Arrow (its own UTF-8 buffer) agree.
    assert rig.det.beat_many(WIDE) == len(WIDE)
    assert rig.det.beat_many(Name(n) for n in WIDE) == len(WIDE)
    assert rig.det.beat_many(pa.array(WIDE)) == len(WIDE)
    assert rig.det.stats()["unknown"] == 0
    assert [rig.det.status(n).last_seen for n in WIDE] == [0.5] * len(WIDE)
    # Fresh str objects equal to the names (not the ones added) find the same topics.
    fresh = [n.encode().decode() for n in WIDE]
    assert [rig.det.handle(n) for n in fresh] == handles
    rig.det.remove(fresh[3])
    assert WIDE[3] not in rig.det
    assert rig.det.add(WIDE[3]) not in handles  # a new handle for the re-added name


def test_names_with_no_utf8_form_raise_and_record_nothing(rig: Rig) -> None:
    rig.det.add_many(["svc.a", "svc.b"])
    lone = "svc.\ud800"  # a lone surrogate: a valid str with no UTF-8 encoding
    with pytest.raises(UnicodeEncodeError):
        rig.det.beat(lone)
    with pytest.raises(UnicodeEncodeError):
        rig.det.beat_many(["svc.a", lone, "svc.b"])
    with pytest.raises(UnicodeEncodeError):
        rig.det.add(lone)
    with pytest.raises(UnicodeEncodeError):
        rig.det.add_many(["svc.c", lone])
    with pytest.raises(UnicodeEncodeError):
        rig.det.status(lone)
    assert rig.det.handle("svc.c") is None  # add_many added none of its names
    assert rig.det.stats()["beats"] == 0
    assert len(rig.det) == 2


def test_a_bad_item_late_in_a_generator_is_named_and_nothing_is_recorded(rig: Rig) -> None:
    rig.det.add_many(["svc.a", "svc.b"])

    def names():
        yield "svc.a"
        yield "svc.b"
        yield b"svc.c"

    with pytest.raises(TypeError, match=r"names\[2\] must be str, got bytes"):
        rig.det.beat_many(names())
    with pytest.raises(TypeError, match=r"names\[1\] must be str, got NoneType"):
        rig.det.add_many(["svc.x", None])
    assert rig.det.stats()["beats"] == 0
    assert "svc.x" not in rig.det


def test_unknown_names_through_the_borrowed_paths_are_counted_or_learned() -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0)
    det.add("svc.known")
    assert not det.beat("svc.zürich")
    assert det.beat_many(["svc.known", "svc.東京"]) == 1
    assert det.stats()["unknown"] == 2
    det.auto_add = True
    assert det.beat("svc.zürich")
    assert det.beat_many(["svc.known", "svc.東京", "svc.東京"]) == 3
    assert {"svc.zürich", "svc.東京"} <= {det.name(h) for h in det.handles()}
    assert len(det) == 3


def test_bad_items_past_the_first_chunk_are_named_and_nothing_is_recorded(rig: Rig) -> None:
    # Names are looked up 64 at a time before any is recorded: an error in a later chunk
    # must still leave every beat unrecorded.
    names = [f"svc.t{i}" for i in range(200)]
    rig.det.add_many(names)
    for bad, exc, message in [
        (None, TypeError, r"names\[130\] must be str, got NoneType"),
        ("svc.\ud800", UnicodeEncodeError, "surrogate"),
    ]:
        for make in (list, tuple, iter):
            batch = [*names[:130], bad, *names[130:]]
            with pytest.raises(exc, match=message):
                rig.det.beat_many(make(batch))
    assert rig.det.stats()["beats"] == 0
    assert rig.det.beat_many(tuple(names)) == 200


def test_an_iterable_that_adds_topics_while_read_does_not_deadlock(rig: Rig) -> None:
    # A generator runs Python code between items: it is drained before the name index is
    # locked, so adding a topic from inside it must not wait for the lookup.
    rig.det.add("svc.a")

    def names():
        yield "svc.a"
        rig.det.add("svc.new")
        yield "svc.new"

    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(rig.det.beat_many(names())), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "beat_many(generator that adds a topic) did not return in 10 s"
    assert done == [2]


def test_learned_names_from_a_long_batch_are_each_added_once() -> None:
    clock = hw.ManualClock()
    det = hw.core.Detector(clock=clock, period=1.0, auto_add=True)
    det.add("svc.known")
    batch = [f"svc.new{i % 150}" for i in range(300)] + ["svc.known"]
    assert det.beat_many(batch) == 301
    assert len(det) == 151
    assert det.stats()["unknown"] == 0


class _AddsOnCollect:
    """Cyclic garbage whose finalizer adds a topic: Python code run by the garbage collector."""

    def __init__(self, det: hw.core.Detector) -> None:
        self.det = det
        self.me = self

    def __del__(self) -> None:
        self.det.add("svc.from-finalizer")


def test_a_finalizer_run_while_names_are_read_may_add_a_topic() -> None:
    # Reading a names argument can run Python code: here the UnicodeEncodeError made for a lone
    # surrogate starts the garbage collector (threshold 1), whose finalizer adds a topic. The
    # name index must not be locked then, or the add waits for the lock its own thread holds.
    det = hw.core.Detector(clock=hw.ManualClock(), period=1.0)
    det.add("svc.a")
    outcome: list[object] = []

    def run() -> None:
        old = gc.get_threshold()
        gc.disable()
        _AddsOnCollect(det)  # garbage now: a cycle only the collector frees
        gc.set_threshold(1)
        gc.enable()
        try:
            det.beat_many(["svc.a", "svc.\ud800"])
        except UnicodeEncodeError as exc:
            outcome.append(exc)
        finally:
            gc.set_threshold(*old)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "beat_many deadlocked with a finalizer that adds a topic"
    assert len(outcome) == 1 and isinstance(outcome[0], UnicodeEncodeError)
    gc.collect()
    assert "svc.from-finalizer" in det
    assert det.stats()["beats"] == 0
