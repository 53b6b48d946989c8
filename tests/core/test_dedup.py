"""The Rust core's DedupWindow through its Python binding (consumers drop duplicates with it)."""

from __future__ import annotations

import threading

import pytest

import heartwire as hw
from heartwire._core import DedupWindow


def test_second_sight_within_the_window_is_a_duplicate() -> None:
    w = DedupWindow(3)
    assert [w.seen(x) for x in ("a", "b", "a", "c")] == [False, False, True, False]
    assert w.stats() == {"checked": 4, "duplicates": 1, "evicted": 0, "size": 3}
    assert "a" in w and len(w) == 3 and w.capacity == 3


def test_the_oldest_id_is_forgotten_beyond_capacity() -> None:
    w = DedupWindow(2)
    assert w.seen_many(["a", "b", "c"]) == [False, False, False]
    assert "a" not in w
    assert not w.seen("a"), "an id older than the window counts as new"
    assert w.stats()["evicted"] == 2


def test_batch_form_sees_repeats_inside_the_batch() -> None:
    w = DedupWindow(10)
    assert w.seen_many(["x", "x", "y", "x"]) == [False, True, False, True]


def test_clear_keeps_the_counters() -> None:
    w = DedupWindow(4)
    w.seen_many(["a", "a"])
    w.clear()
    assert len(w) == 0 and not w.seen("a")
    assert w.stats()["checked"] == 3 and w.stats()["duplicates"] == 1


@pytest.mark.parametrize("bad", [0, -1])
def test_capacity_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        DedupWindow(bad)


def test_distinct_ids_are_never_confused() -> None:
    # Ids are kept whole (no hashing to a fixed width): 200 000 distinct ids, none a duplicate.
    w = DedupWindow(200_000)
    ids = [f"sender:{i}" for i in range(200_000)]
    assert not any(w.seen_many(ids))
    assert all(w.seen_many(ids[-1000:]))


def test_threads_share_one_window() -> None:
    w = DedupWindow(100_000)
    firsts: list[int] = []
    lock = threading.Lock()

    def run() -> None:
        n = sum(not w.seen(f"id{i}") for i in range(20_000))
        with lock:
            firsts.append(n)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(firsts) == 20_000, "each id is new exactly once across threads"
    assert w.stats()["duplicates"] == 60_000


def test_exported_from_the_package() -> None:
    assert hw.core.DedupWindow is DedupWindow
