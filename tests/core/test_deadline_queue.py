"""The core's deadline queue (publishers' timers): exact due order under the manual clock, one key
on the real clock."""

from __future__ import annotations

import math
import threading

import pytest

from heartwire import _core

DeadlineQueue = _core.DeadlineQueue
ManualClock = _core.ManualClock


@pytest.fixture
def clock() -> _core.ManualClock:
    return ManualClock()


@pytest.fixture
def queue(clock: _core.ManualClock) -> _core.DeadlineQueue:
    return DeadlineQueue(clock)


def test_keys_come_due_in_deadline_order_with_their_exact_deadlines(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    queue.schedule(3, 2.0)
    queue.schedule(1, 1.0)
    queue.schedule(2, 1.0)
    queue.schedule(0, 0.25)
    assert len(queue) == 4
    assert queue.try_pop() == []
    clock.advance(0.25)
    assert queue.try_pop() == [(0, 0.25)]
    clock.advance(0.75)  # exactly at the deadline: due
    assert queue.try_pop() == [(1, 1.0), (2, 1.0)]
    clock.advance(5.0)
    assert queue.try_pop() == [(3, 2.0)]
    assert len(queue) == 0
    assert queue.now() == 6.0


def test_reschedule_moves_a_key_and_cancel_removes_it_even_when_due(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    queue.schedule(5, 1.0)
    queue.schedule(5, 3.0)  # replaces the 1.0 deadline
    assert len(queue) == 1
    clock.advance(2.0)
    assert queue.try_pop() == []
    queue.schedule(6, 0.5)  # already passed: due at once
    queue.schedule(7, 0.5)
    assert queue.cancel(7)
    assert not queue.cancel(7)
    assert not queue.cancel(1000)  # never scheduled
    assert queue.try_pop() == [(6, 0.5)]
    clock.advance(1.0)
    assert queue.try_pop() == [(5, 3.0)]


def test_ten_thousand_keys_come_out_in_order_in_batches(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    n = 10_000
    # Deadlines on a 1 ms grid, ten keys per deadline, scheduled in scrambled order.
    keys = sorted(range(n), key=lambda k: (k * 7919) % n)
    for k in keys:
        queue.schedule(k, (k // 10 + 1) / 1000)
    assert len(queue) == n
    clock.advance(0.5)  # half of them
    got: list[tuple[int, float]] = []
    while batch := queue.try_pop(1024):
        assert len(batch) <= 1024
        got.extend(batch)
    assert got == [(k, (k // 10 + 1) / 1000) for k in range(5000)]
    # Re-schedule every popped key one second later; the other half stays as it was.
    for k, at in got:
        queue.schedule(k, at + 1.0)
    clock.advance(10.0)
    rest = queue.pop(max=n, timeout=0)
    assert [k for k, _ in rest] == list(range(5000, n)) + list(range(5000))
    assert all(round(at * 1000) == k // 10 + 1 + (1000 if k < 5000 else 0) for k, at in rest)
    assert len(queue) == 0


def test_pop_waits_with_the_gil_released_until_the_clock_moves(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    queue.schedule(9, 1.0)
    got: list[list[tuple[int, float]]] = []
    popper = threading.Thread(target=lambda: got.append(queue.pop(timeout=10.0)))
    popper.start()
    clock.advance(1.0)  # runs while the popper waits: the GIL is free
    popper.join(timeout=10.0)
    assert not popper.is_alive()
    assert got == [[(9, 1.0)]]


def test_close_wakes_a_waiting_pop_and_later_pops_are_empty(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    got: list[list[tuple[int, float]]] = []
    waiter = threading.Thread(target=lambda: got.append(queue.pop()))
    waiter.start()
    queue.close()
    waiter.join(timeout=10.0)
    assert not waiter.is_alive()
    assert got == [[]]
    queue.schedule(1, 0.0)
    clock.advance(1.0)
    assert queue.try_pop() == []
    assert queue.pop(timeout=None) == []
    queue.start()  # a no-op once closed


def test_pop_times_out_when_nothing_is_due(queue: _core.DeadlineQueue) -> None:
    queue.schedule(1, 1.0)
    assert queue.pop(timeout=0.001) == []
    assert queue.pop(timeout=0) == []


@pytest.mark.parametrize(
    ("call", "exc", "names"),
    [
        (lambda s: s.schedule(1, -1.0), ValueError, "at"),
        (lambda s: s.schedule(1, math.nan), ValueError, "at"),
        (lambda s: s.schedule(1, math.inf), ValueError, "at"),
        (lambda s: s.schedule(-1, 1.0), ValueError, "key"),
        (lambda s: s.schedule(2**24, 1.0), ValueError, "key"),
        (lambda s: s.schedule(2**70, 1.0), ValueError, "key"),
        (lambda s: s.schedule("a", 1.0), TypeError, "key"),
        (lambda s: s.cancel(-5), ValueError, "key"),
        (lambda s: s.pop(max=0), ValueError, "max"),
        (lambda s: s.try_pop(-1), ValueError, "max"),
        (lambda s: s.pop(timeout=-1.0), ValueError, "timeout"),
        (lambda s: s.pop(timeout=math.nan), ValueError, "timeout"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    queue: _core.DeadlineQueue, call, exc: type[Exception], names: str
) -> None:
    with pytest.raises(exc, match=names):
        call(queue)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="resolution"):
        DeadlineQueue(ManualClock(), resolution=0.0)
    with pytest.raises(ValueError, match="tick"):
        DeadlineQueue(tick=-1.0)


def test_start_and_stop_are_no_ops_with_a_manual_clock(
    clock: _core.ManualClock, queue: _core.DeadlineQueue
) -> None:
    queue.stop()
    queue.start()
    queue.schedule(1, 1.0)
    clock.advance(1.0)
    assert queue.try_pop() == [(1, 1.0)]


def test_one_key_fires_on_the_real_clock_within_a_bounded_wait() -> None:
    queue = DeadlineQueue(tick=0.002)
    try:
        at = queue.now() + 0.05
        queue.schedule(42, at)
        got = queue.pop(timeout=5.0)
        assert got == [(42, pytest.approx(at, abs=1e-9))]
        assert queue.now() >= at
        # stop/start restart the driver.
        queue.stop()
        queue.start()
        queue.schedule(43, queue.now())
        assert [k for k, _ in queue.pop(timeout=5.0)] == [43]
    finally:
        queue.close()
