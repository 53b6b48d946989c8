"""The publishers' executor's check threads: hung jobs cost a thread each and never hold up the
others; quick bursts do not grow the pool; abandoned jobs are not waited for."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire import executor
from heartwire.checks import CheckFailed
from heartwire.events import ExceptionEvent
from heartwire.executor import PublisherExecutor
from heartwire.listeners import PublisherListener
from heartwire.publisher import HeartbeatPublisher
from heartwire.transport.memory import MemoryBroker


def _wait_until(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let every hung job return


def test_hung_blocking_tasks_do_not_hold_up_the_others(gate: threading.Event) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, check_threads=2)
    ran: list[float] = []
    try:
        hung = [sched.add(lambda d: gate.wait(20), blocking=True) for _ in range(2)]
        quick = sched.add(ran.append, blocking=True)
        for key in (*hung, quick):
            sched.schedule(key, 0.0)
        clock.advance(0.0)
        assert _wait_until(lambda: ran == [0.0], 2.0), "a quick task waited behind 2 hung ones"
        assert sched.stats()["check_threads"] == 3
    finally:
        gate.set()
        sched.close()


def test_a_burst_of_quick_jobs_does_not_grow_the_pool() -> None:
    sched = PublisherExecutor(hw.ManualClock(), check_threads=2)
    sched.add(lambda d: None)  # runs the scheduler thread (it looks after the pool)
    done: list[int] = []
    try:
        for i in range(20_000):  # the queue waits more than a stall; no job is slow
            sched.submit(functools.partial(done.append, i))
        assert sched.drain(timeout=30)
        assert len(done) == 20_000
        assert sched.stats()["check_threads"] <= 2
    finally:
        sched.close()


def test_threads_never_exceed_max_check_threads(gate: threading.Event) -> None:
    sched = PublisherExecutor(hw.ManualClock(), check_threads=1, max_check_threads=3, stall=0.02)
    sched.add(lambda d: None)
    started = []
    try:
        jobs = [sched.submit(lambda: (started.append(1), gate.wait(20))) for _ in range(5)]
        assert _wait_until(lambda: len(started) == 3, 2.0)
        time.sleep(0.1)  # several stalls: no fourth thread
        assert len(started) == 3 and sched.stats()["check_threads"] == 3
        assert sched.stats()["jobs"] == 5
        assert [sched.abandon(j) for j in jobs] == ["running"] * 3 + ["queued"] * 2
        assert sched.drain(timeout=1)  # abandoned jobs are not waited for
        assert sched.stats()["abandoned"] == 3
        gate.set()
        assert _wait_until(lambda: sched.stats()["abandoned"] == 0, 5.0)
        assert len(started) == 3  # the two abandoned while queued never ran
        assert sched.abandon(jobs[0]) == "done"
    finally:
        sched.close()


def test_executor_pool_arguments_are_checked() -> None:
    with pytest.raises(
        ValueError, match=r"max_check_threads must be >= check_threads \(4\), got 2"
    ):
        PublisherExecutor(max_check_threads=2)
    with pytest.raises(TypeError, match=r"max_check_threads must be an int, got float 2\.0"):
        PublisherExecutor(max_check_threads=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"stall must be a finite number of seconds > 0, got 0"):
        PublisherExecutor(stall=0)
    with pytest.raises(TypeError, match="stall must be a number of seconds, got str '1'"):
        PublisherExecutor(stall="1")  # type: ignore[arg-type]


class _Exceptions(PublisherListener):
    def __init__(self) -> None:
        self.events: list[ExceptionEvent] = []

    def on_exception(self, event: ExceptionEvent) -> None:
        self.events.append(event)


def test_a_check_that_never_got_a_thread_is_retried_at_the_next_beat(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, check_threads=1, max_check_threads=1)
    monkeypatch.setitem(executor._manual, id(clock), sched)  # a one-thread pool for this clock
    broker = MemoryBroker()
    rec = _Exceptions()
    calls = []
    hung = HeartbeatPublisher(broker, "svc.hung", dependency=lambda: gate.wait(20), clock=clock)
    ok = HeartbeatPublisher(
        broker, "svc.ok", dependency=lambda: calls.append(1), clock=clock, listeners=[rec]
    )
    try:
        hung.start()
        assert _wait_until(lambda: sched.stats()["jobs"] == 1 and sched.stats()["check_threads"], 2)
        ok.start()  # its check waits: the one thread is hung
        assert _wait_until(lambda: sched.stats()["jobs"] == 2, 2.0)
        clock.advance(1.0)  # both limits pass; ok's next check is queued again
        assert _wait_until(lambda: ok.stats()["check_failures"] == 1, 2.0)
        assert not sched.drain(timeout=0.05)  # that new check is still due
        assert calls == []
        gate.set()  # the thread is free: ok's new check (started at this beat) runs
        assert _wait_until(lambda: ok.sent == 1, 2.0)
        assert sched.drain(timeout=2)  # (the report waited for a thread too: one in all)
        assert [e.detail for e in rec.events] == [
            f"{ok._dependency.__qualname__}: timed out after 1 s waiting for a check thread"
        ]
        assert isinstance(rec.events[0].error, CheckFailed)
        clock.advance(1.0)
        assert sched.drain(timeout=2)
        assert (ok.sent, hung.sent, len(calls)) == (2, 1, 2)
    finally:
        gate.set()
        hung.stop()
        ok.stop()
        sched.close()


# -- a check thread that cannot start (issue 14, review R2 F5) -------------------------------


class _FailingStarts:
    """Makes ``Thread.start`` fail, as at a pids limit, for threads named ``prefix...``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.on = False
        self.failed = 0


@pytest.fixture
def failing_starts(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(prefix: str) -> _FailingStarts:
        ctl = _FailingStarts(prefix)
        real = threading.Thread.start

        def start(thread: threading.Thread) -> None:
            if ctl.on and thread.name.startswith(ctl.prefix):
                ctl.failed += 1
                raise RuntimeError("can't start new thread")
            real(thread)

        monkeypatch.setattr(threading.Thread, "start", start)
        return ctl

    return make


def test_a_check_thread_that_cannot_start_does_not_end_the_scheduler_thread(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch, failing_starts: Any
) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, check_threads=2, max_check_threads=8, stall=0.02, name="t-f5")
    monkeypatch.setitem(executor._manual, id(clock), sched)
    fails = failing_starts("t-f5-check-")
    broker = MemoryBroker()
    entered: list[int] = []

    def hang() -> bool:
        entered.append(1)
        return gate.wait(20)

    plain = HeartbeatPublisher(broker, "svc.plain", clock=clock)
    hung = [HeartbeatPublisher(broker, f"svc.h{i}", dependency=hang, clock=clock) for i in range(2)]
    ok = HeartbeatPublisher(broker, "svc.ok", dependency=lambda: True, clock=clock)
    try:
        plain.start()
        for pub in hung:
            pub.start()
        assert _wait_until(lambda: len(entered) == 2, 2.0), "the hung checks did not start"
        fails.on = True  # from now on no check thread can start
        ok.start()  # its check waits behind the hung ones: the pool tries to grow, and fails
        assert _wait_until(lambda: fails.failed >= 1, 2.0), "the pool never tried to grow"
        thread = sched._thread
        assert thread is not None and thread.is_alive(), "the scheduler thread died"
        assert sched.stats()["check_threads"] == 2  # the thread that never started not counted
        assert sched.stats()["spawn_failures"] >= 1
        clock.advance(1.0)
        assert _wait_until(lambda: plain.sent == 2, 2.0), "a plain publisher stopped beating"
        fails.on = False  # threads can start again: the pool retries by itself
        assert _wait_until(lambda: ok.sent == 1, 3.0), "the waiting check never got a thread"
    finally:
        gate.set()
        for pub in (plain, *hung, ok):
            pub.stop()
        sched.close()


def test_a_beat_whose_check_thread_cannot_start_is_run_once_one_can(
    monkeypatch: pytest.MonkeyPatch, failing_starts: Any
) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, check_threads=1, name="t-f5s")
    monkeypatch.setitem(executor._manual, id(clock), sched)
    fails = failing_starts("t-f5s-check-")
    fails.on = True
    pub = HeartbeatPublisher(MemoryBroker(), "svc.dep", dependency=lambda: True, clock=clock)
    try:
        pub.start()  # the first beat's submit (on the scheduler thread) cannot start a thread
        assert _wait_until(lambda: fails.failed >= 1, 2.0)
        assert sched.stats()["check_threads"] == 0  # not counted: the pool knows to retry
        fails.on = False
        assert _wait_until(lambda: pub.sent == 1, 3.0), "the queued check never ran"
        assert pub.stats()["check_failures"] == 0
    finally:
        pub.stop()
        sched.close()


def test_a_scheduler_round_that_raises_is_counted_and_the_thread_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, name="t-round")
    rounds: list[int] = []
    real = sched._pool.rebalance

    def rebalance() -> float | None:
        rounds.append(1)
        if len(rounds) == 1:
            raise MemoryError("injected")
        return real()

    monkeypatch.setattr(sched._pool, "rebalance", rebalance)
    ran: list[float] = []
    try:
        key = sched.add(ran.append)
        sched.schedule(key, 0.5)
        clock.advance(1.0)
        assert sched.drain(timeout=2.0), "the scheduler thread died"
        assert ran == [0.5]
        assert sched.stats()["errors"] == 1
        assert "t-round: a scheduler round raised MemoryError('injected')" in caplog.text
    finally:
        sched.close()


def test_jobs_abandoned_while_queued_leave_the_queue(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every thread held by a hung check, each starved beat's job is abandoned and a new
    one queued: the queue keeps one entry per publisher, not one per beat (review R2 F9)."""
    clock = hw.ManualClock()
    sched = PublisherExecutor(clock, check_threads=1, max_check_threads=1)
    monkeypatch.setitem(executor._manual, id(clock), sched)
    broker = MemoryBroker()
    hung = HeartbeatPublisher(broker, "svc.hung", dependency=lambda: gate.wait(20), clock=clock)
    starved = [
        HeartbeatPublisher(broker, f"svc.s{i}", dependency=lambda: True, clock=clock)
        for i in range(5)
    ]
    pool = sched._pool
    try:
        hung.start()
        assert _wait_until(lambda: sched.stats()["check_threads"] == 1 and not pool._jobs, 2.0)
        for pub in starved:
            pub.start()
        # Every first check queued (its beat at 0 fired) before the clock moves.
        assert _wait_until(lambda: sched.stats()["jobs"] == 1 + len(starved), 2.0)
        sizes = []
        for beat in range(1, 41):
            clock.advance(1.0)  # each starved check times out waiting and is queued afresh

            def failed(n: int = beat) -> bool:
                return all(p.stats()["check_failures"] == n for p in starved)

            assert _wait_until(failed, 2.0), f"beat {beat} not reported as failed"
            sizes.append(len(pool._jobs))
        assert max(sizes) <= len(starved), f"the queue grew: {sizes}"
        gate.set()  # the thread is free: each publisher's one queued check runs
        assert _wait_until(lambda: all(p.sent == 1 for p in starved), 2.0)
        assert _wait_until(lambda: not pool._jobs, 2.0)
    finally:
        gate.set()
        for pub in (hung, *starved):
            pub.stop()
        sched.close()


# -- checks that raise BaseException (issue 14, review R2 F1 remainder) ----------------------


def test_a_job_raising_system_exit_is_counted_and_its_thread_goes_on() -> None:
    sched = PublisherExecutor(hw.ManualClock(), check_threads=1, max_check_threads=1)
    sched.add(lambda d: None)
    ran_on: list[int] = []

    def exits() -> None:
        ran_on.append(threading.get_ident())
        raise SystemExit(3)

    try:
        sched.submit(exits)
        assert sched.drain(timeout=2)
        sched.submit(lambda: ran_on.append(threading.get_ident()))
        assert sched.drain(timeout=2), "the next job never ran"
        assert len(ran_on) == 2 and ran_on[0] == ran_on[1], "the check thread died"
        assert sched.stats()["errors"] == 1 and sched.stats()["check_threads"] == 1
    finally:
        sched.close()


@pytest.mark.parametrize("where", ["dependency", "payload"])
@pytest.mark.parametrize("exc", [SystemExit(1), KeyboardInterrupt()])
def test_a_check_or_payload_raising_a_base_exception_fails_one_beat_only(
    where: str, exc: BaseException
) -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    rec = _Exceptions()
    calls: list[int] = []

    def flaky() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return True

    kw: dict[str, Any] = {where: flaky}
    pub = HeartbeatPublisher(broker, "svc.x", clock=clock, listeners=[rec], **kw)
    sched = pub.executor
    try:
        pub.start()
        assert sched.drain(timeout=2)
        threads = sched.stats()["check_threads"]
        clock.advance(1.0)
        assert sched.drain(timeout=2)
        assert pub.sent == 1, f"the beat after the {type(exc).__name__} was not sent"
        assert len(calls) == 2
        reason = "check_failed" if where == "dependency" else "payload_failed"
        assert [(e.reason, type(e.error)) for e in rec.events] == [(reason, type(exc))]
        assert sched.stats()["check_threads"] == threads  # no check thread lost
    finally:
        pub.stop()


class _ExitsOnce(PublisherListener):
    def __init__(self) -> None:
        self.seqs: list[int] = []

    def on_sent(self, event: Any) -> None:
        self.seqs.append(event.seq)
        if len(self.seqs) == 1:
            raise SystemExit(2)


def test_a_listener_raising_system_exit_does_not_stop_later_events() -> None:
    clock = hw.ManualClock()
    rec = _ExitsOnce()
    pub = HeartbeatPublisher(MemoryBroker(), "svc.l", clock=clock, listeners=[rec])
    sched = pub.executor
    try:
        pub.start()
        assert sched.drain(timeout=2)
        assert _wait_until(lambda: rec.seqs == [1], 2.0)
        clock.advance(1.0)
        assert sched.drain(timeout=2)
        assert _wait_until(lambda: rec.seqs == [1, 2], 2.0), f"events stopped: {rec.seqs}"
    finally:
        pub.stop()


def test_the_scheduler_thread_starts_one_check_thread_per_growth_step(
    gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting a thread takes milliseconds under load (the new thread must get the GIL):
    the scheduler thread, which every publisher shares, starts one per growth step and the
    new threads start the rest."""
    sched = PublisherExecutor(
        hw.ManualClock(), check_threads=1, max_check_threads=40, stall=0.02, name="t-grow"
    )
    starters: list[str] = []
    real = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("t-grow-check-"):
            starters.append(threading.current_thread().name)
        real(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    sched.add(lambda d: None)  # runs the scheduler thread (it grows the pool)
    entered: list[int] = []

    def hang() -> None:
        entered.append(1)
        gate.wait(20)

    try:
        for _ in range(32):
            sched.submit(hang)
        assert _wait_until(lambda: len(entered) == 32, 5.0), f"{len(entered)} of 32 started"
        assert len(starters) == 32
        on_scheduler = starters.count("t-grow")
        assert on_scheduler <= 5, f"{on_scheduler} of 32 thread starts on the scheduler thread"
    finally:
        gate.set()
        sched.close()


class _OddCheck:
    """A check that hangs and whose ``repr`` raises (and records the thread it is asked on)."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate
        self.entered = threading.Event()
        self.repr_on: list[str] = []

    def __call__(self) -> bool:
        self.entered.set()
        return self.gate.wait(20)

    def __repr__(self) -> str:
        self.repr_on.append(threading.current_thread().name)
        raise RuntimeError("no repr")


def test_a_timed_out_check_is_described_without_calling_its_repr_on_the_scheduler_thread(
    gate: threading.Event,
) -> None:
    clock = hw.ManualClock()
    check = _OddCheck(gate)
    rec = _Exceptions()
    pub = HeartbeatPublisher(
        MemoryBroker(), "svc.odd", clock=clock, dependency=check, timeout=0.5, listeners=[rec]
    )
    sched = pub.executor
    try:
        pub.start()
        assert check.entered.wait(2.0), "the check did not start"
        clock.advance(0.5)  # its limit: reported from the scheduler thread
        assert _wait_until(lambda: len(rec.events) == 1, 2.0), "the time-out was not reported"
        assert rec.events[0].detail == "<_OddCheck object>: timed out after 0.5 s"
        assert sched.name not in check.repr_on
    finally:
        gate.set()
        pub.stop()


def test_a_scheduler_thread_that_cannot_start_is_started_by_the_next_add(
    failing_starts: Any,
) -> None:
    sched = PublisherExecutor(hw.ManualClock(), name="t-sched")
    fails = failing_starts("t-sched")
    ran: list[float] = []
    try:
        fails.on = True
        with pytest.raises(RuntimeError, match="t-sched: could not start the scheduler thread"):
            sched.add(ran.append)
        assert len(sched) == 0  # nothing registered that no thread would run
        fails.on = False
        key = sched.add(ran.append)
        sched.schedule(key, 0.0)
        sched.clock.advance(1.0)  # type: ignore[union-attr]
        assert sched.drain(timeout=2.0), "no scheduler thread runs the task"
        assert ran == [0.0]
    finally:
        sched.close()
