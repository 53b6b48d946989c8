"""The core's publisher scheduler: exact due order under the manual clock, one key on the real."""

from __future__ import annotations

import math
import threading

import pytest

from heartwire import _core

Scheduler = _core.Scheduler
ManualClock = _core.ManualClock


@pytest.fixture
def clock() -> _core.ManualClock:
    return ManualClock()


@pytest.fixture
def sched(clock: _core.ManualClock) -> _core.Scheduler:
    return Scheduler(clock)


def test_keys_come_due_in_deadline_order_with_their_exact_deadlines(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    sched.schedule(3, 2.0)
    sched.schedule(1, 1.0)
    sched.schedule(2, 1.0)
    sched.schedule(0, 0.25)
    assert len(sched) == 4
    assert sched.try_pop() == []
    clock.advance(0.25)
    assert sched.try_pop() == [(0, 0.25)]
    clock.advance(0.75)  # exactly at the deadline: due
    assert sched.try_pop() == [(1, 1.0), (2, 1.0)]
    clock.advance(5.0)
    assert sched.try_pop() == [(3, 2.0)]
    assert len(sched) == 0
    assert sched.now() == 6.0


def test_reschedule_moves_a_key_and_cancel_removes_it_even_when_due(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    sched.schedule(5, 1.0)
    sched.schedule(5, 3.0)  # replaces the 1.0 deadline
    assert len(sched) == 1
    clock.advance(2.0)
    assert sched.try_pop() == []
    sched.schedule(6, 0.5)  # already passed: due at once
    sched.schedule(7, 0.5)
    assert sched.cancel(7)
    assert not sched.cancel(7)
    assert not sched.cancel(1000)  # never scheduled
    assert sched.try_pop() == [(6, 0.5)]
    clock.advance(1.0)
    assert sched.try_pop() == [(5, 3.0)]


def test_ten_thousand_keys_come_out_in_order_in_batches(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    n = 10_000
    # Deadlines on a 1 ms grid, ten keys per deadline, scheduled in scrambled order.
    keys = sorted(range(n), key=lambda k: (k * 7919) % n)
    for k in keys:
        sched.schedule(k, (k // 10 + 1) / 1000)
    assert len(sched) == n
    clock.advance(0.5)  # half of them
    got: list[tuple[int, float]] = []
    while batch := sched.try_pop(1024):
        assert len(batch) <= 1024
        got.extend(batch)
    assert got == [(k, (k // 10 + 1) / 1000) for k in range(5000)]
    # Re-schedule every popped key one second later; the other half stays as it was.
    for k, at in got:
        sched.schedule(k, at + 1.0)
    clock.advance(10.0)
    rest = sched.pop(max=n, timeout=0)
    assert [k for k, _ in rest] == list(range(5000, n)) + list(range(5000))
    assert all(round(at * 1000) == k // 10 + 1 + (1000 if k < 5000 else 0) for k, at in rest)
    assert len(sched) == 0


def test_pop_waits_with_the_gil_released_until_the_clock_moves(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    sched.schedule(9, 1.0)
    got: list[list[tuple[int, float]]] = []
    popper = threading.Thread(target=lambda: got.append(sched.pop(timeout=10.0)))
    popper.start()
    clock.advance(1.0)  # runs while the popper waits: the GIL is free
    popper.join(timeout=10.0)
    assert not popper.is_alive()
    assert got == [[(9, 1.0)]]


def test_close_wakes_a_waiting_pop_and_later_pops_are_empty(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    got: list[list[tuple[int, float]]] = []
    waiter = threading.Thread(target=lambda: got.append(sched.pop()))
    waiter.start()
    sched.close()
    waiter.join(timeout=10.0)
    assert not waiter.is_alive()
    assert got == [[]]
    sched.schedule(1, 0.0)
    clock.advance(1.0)
    assert sched.try_pop() == []
    assert sched.pop(timeout=None) == []
    sched.start()  # a no-op once closed


def test_pop_times_out_when_nothing_is_due(sched: _core.Scheduler) -> None:
    sched.schedule(1, 1.0)
    assert sched.pop(timeout=0.001) == []
    assert sched.pop(timeout=0) == []


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
    sched: _core.Scheduler, call, exc: type[Exception], names: str
) -> None:
    with pytest.raises(exc, match=names):
        call(sched)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="resolution"):
        Scheduler(ManualClock(), resolution=0.0)
    with pytest.raises(ValueError, match="tick"):
        Scheduler(tick=-1.0)


def test_start_and_stop_are_no_ops_with_a_manual_clock(
    clock: _core.ManualClock, sched: _core.Scheduler
) -> None:
    sched.stop()
    sched.start()
    sched.schedule(1, 1.0)
    clock.advance(1.0)
    assert sched.try_pop() == [(1, 1.0)]


def test_one_key_fires_on_the_real_clock_within_a_bounded_wait() -> None:
    sched = Scheduler(tick=0.002)
    try:
        at = sched.now() + 0.05
        sched.schedule(42, at)
        got = sched.pop(timeout=5.0)
        assert got == [(42, pytest.approx(at, abs=1e-9))]
        assert sched.now() >= at
        # stop/start restart the driver.
        sched.stop()
        sched.start()
        sched.schedule(43, sched.now())
        assert [k for k, _ in sched.pop(timeout=5.0)] == [43]
    finally:
        sched.close()
