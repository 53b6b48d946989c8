"""The exit registry (heartwire._exit): kinds stopped in rank order, failures logged, weak."""

from __future__ import annotations

import gc
import logging

import pytest

from heartwire import _exit


class _Thing:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log


def test_kinds_stop_in_rank_order_and_a_failure_does_not_stop_the_rest(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_exit, "_kinds", [])
    order: list[str] = []

    def stop(thing: _Thing) -> None:
        if thing.name == "bad":
            raise RuntimeError("cannot stop")
        order.append(thing.name)

    late = _exit.Running(stop, rank=1)
    early = _exit.Running(stop, rank=0)
    things = [_Thing("scheduler", order), _Thing("bad", order), _Thing("publisher", order)]
    late.add(things[0])
    early.add(things[1])
    early.add(things[2])
    with caplog.at_level(logging.ERROR, logger="heartwire"):
        _exit.stop_all()
    assert order == ["publisher", "scheduler"]
    assert "stopping" in caplog.text and "at exit failed" in caplog.text


def test_a_dropped_thing_is_not_kept_for_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exit, "_kinds", [])
    stopped: list[str] = []
    kind = _exit.Running(lambda thing: stopped.append(thing.name))
    thing = _Thing("gone", [])
    kind.add(thing)
    assert thing in kind
    del thing
    gc.collect()
    _exit.stop_all()
    assert stopped == []


def test_shared_executors_close_after_the_publishers_and_monitors() -> None:
    import heartwire as hw
    from heartwire import executor, monitor, publisher

    sched = executor.shared_executor(hw.ManualClock())
    assert sched in executor._shared
    assert executor._shared.rank > publisher._running.rank
    assert executor._shared.rank > monitor._running.rank
    sched.close()
