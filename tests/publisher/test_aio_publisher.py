"""A publisher whose dependency check is a coroutine: it runs on the loop running at start(),
holds no check thread while it runs, is cancelled at its time limit; exact beats under the
manual clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.events import ExceptionEvent
from heartwire.executor import shared_executor
from heartwire.transport.memory import MemoryBroker

WAIT = 5.0


class Recorder(hw.PublisherListener):
    def __init__(self) -> None:
        self.errors: list[ExceptionEvent] = []

    def on_exception(self, event: ExceptionEvent) -> None:
        self.errors.append(event)


def beats(messages: list[Any]) -> list[Beat]:
    codec = BeatCodec(None)
    return [codec.decode(m.body, m.destination) for m in messages]


async def drain(clock: hw.ManualClock, timeout: float = WAIT) -> bool:
    return await asyncio.to_thread(shared_executor(clock).drain, timeout)


async def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT} s")
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
async def test_coroutine_check_outcomes_make_exact_beats_on_the_callers_loop() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    messages: list[Any] = []
    broker.subscribe(">", messages.append)
    loop = asyncio.get_running_loop()
    outcomes: list[Any] = [True, False, hw.CheckFailed("db down"), ValueError("secret"), None]
    ran_on: list[asyncio.AbstractEventLoop] = []

    async def db_ok() -> bool:
        ran_on.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    rec = Recorder()
    pub = hw.HeartbeatPublisher(broker, "svc.a", 1.0, clock=clock, dependency=db_ok)
    pub.add_listener(rec)
    async with pub:
        assert await drain(clock)
        for _ in range(4):
            clock.advance(1.0)
            assert await drain(clock)
    got = [(b.seq, b.state, b.reason) for b in beats(messages)]
    assert got == [
        (1, "up", None),
        (2, "down", f"{db_ok.__qualname__} returned False"),
        (3, "down", "db down"),
        (4, "down", f"{db_ok.__qualname__}: ValueError"),  # its text stays local
        (5, "up", None),
    ]
    assert ran_on == [loop] * 5
    assert [e.reason for e in rec.errors] == ["check_failed"] * 3
    assert pub.stats()["check_failures"] == 3


@pytest.mark.asyncio
async def test_hung_coroutine_checks_hold_no_thread_and_are_cancelled_at_their_limit() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    hang = asyncio.Event()  # never set
    cancelled = 0
    started = 0

    async def stuck() -> bool:
        nonlocal cancelled, started
        started += 1
        try:
            await hang.wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return True

    sched = shared_executor(clock)
    recs = [Recorder() for _ in range(20)]
    pubs = [
        hw.HeartbeatPublisher(
            broker, f"svc.hung{i}", 1.0, clock=clock, dependency=stuck, timeout=0.5
        )
        for i in range(20)
    ]
    for pub, rec in zip(pubs, recs, strict=True):
        pub.add_listener(rec)
    fast = hw.HeartbeatPublisher(broker, "svc.fast", 0.25, clock=clock, dependency=lambda: True)
    for pub in [*pubs, fast]:
        pub.start()
    try:
        await until(lambda: started == 20, "20 coroutine checks running")
        # Past the pool's stall (0.05 s real time) with 20 checks pending: a blocking check
        # would each hold a thread and grow the pool past its 4; coroutines hold none.
        for _ in range(4):
            await asyncio.sleep(0.03)
            clock.advance(0.1)
        await until(lambda: fast.seq == 2, "the fast publisher's next beat")
        stats = sched.stats()
        assert stats["check_threads"] <= 4, stats
        assert stats["abandoned"] == 0, stats
        assert cancelled == 0
        clock.advance(0.1)  # 0.5: every hung check's limit
        await until(lambda: cancelled == 20, "the 20 checks cancelled")
        assert await drain(clock)  # and nothing is left in flight
        for rec in recs:
            [err] = rec.errors
            assert err.reason == "check_failed"
            assert err.detail.endswith("timed out after 0.5 s"), err.detail
        assert all(not pub.stats()["down_sent"] for pub in pubs)  # a time-out sends nothing
    finally:
        for pub in [*pubs, fast]:
            pub.stop()


@pytest.mark.asyncio
async def test_stop_cancels_a_coroutine_check_in_flight() -> None:
    clock = hw.ManualClock()
    seen: list[str] = []

    async def slow() -> bool:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return True

    pub = hw.HeartbeatPublisher(MemoryBroker(), "svc.a", 1.0, clock=clock, dependency=slow)
    async with pub:
        await until(lambda: shared_executor(clock).stats()["jobs"] == 1, "the check held")
    await until(lambda: seen == ["cancelled"], "the check cancelled")
    assert await drain(clock)
    assert pub.sent == 0


def test_an_async_def_check_needs_a_running_loop_at_start() -> None:
    async def check() -> bool:
        return True

    class Probe:
        async def __call__(self) -> bool:
            return True

    for dependency in (check, Probe()):
        pub = hw.HeartbeatPublisher(MemoryBroker(), "svc.a", 1.0, dependency=dependency)
        with pytest.raises(RuntimeError, match=r"publisher of 'svc\.a': its dependency .* is a"):
            pub.start()
        assert not pub.running


def test_a_check_whose_loop_is_closed_fails_its_beats() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    messages: list[Any] = []
    broker.subscribe(">", messages.append)

    def check() -> Any:  # a plain callable returning an awaitable: allowed without a loop
        async def probe() -> bool:
            return True

        return probe()

    pub = hw.HeartbeatPublisher(broker, "svc.a", 1.0, clock=clock, dependency=check)

    async def main() -> None:
        pub.start()  # captures this loop, closed when asyncio.run returns
        assert await drain(clock)

    try:
        asyncio.run(main())
        clock.advance(1.0)
        assert shared_executor(clock).drain(WAIT)
    finally:
        pub.stop()
    got = [(b.seq, b.state, b.reason) for b in beats(messages)]
    assert got == [
        (1, "up", None),
        (2, "down", f"{check.__qualname__}: no event loop to run the coroutine check on"),
    ]
