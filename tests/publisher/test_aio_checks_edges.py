"""Coroutine checks, the edges (review 19): ``drain()`` on the loop that runs the check
refuses at once (``adrain()`` waits), and a check that ignores its cancellation stays the
one check of its publisher until it returns, each beat due meanwhile failing and counted.
Manual clock, embedded broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.events import ExceptionEvent
from heartwire.executor import shared_executor
from heartwire.transport.memory import MemoryBroker

WAIT = 5.0


class Recorder(hw.PublisherListener):
    def __init__(self) -> None:
        self.errors: list[ExceptionEvent] = []

    def on_exception(self, event: ExceptionEvent) -> None:
        self.errors.append(event)


async def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT} s")
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
async def test_drain_on_the_loop_of_a_coroutine_check_refuses_at_once() -> None:
    clock = hw.ManualClock()

    async def ok() -> bool:
        await asyncio.sleep(0)
        return True

    pub = hw.HeartbeatPublisher(MemoryBroker(), "svc.a", 1.0, clock=clock, dependency=ok)
    sched = shared_executor(clock)
    async with pub:  # the first beat's check is due now, and can only run on this loop
        began = time.monotonic()
        with pytest.raises(RuntimeError, match=r"event loop running a coroutine check .*adrain"):
            sched.drain(WAIT)  # on the loop's thread
        took = time.monotonic() - began
        assert took < 1.0, f"drain() blocked the loop {took:.2f} s before refusing"
        assert await sched.adrain(WAIT)
        assert pub.sent == 1


@pytest.mark.asyncio
async def test_drain_on_a_loop_running_no_check_still_waits() -> None:
    clock = hw.ManualClock()
    pub = hw.HeartbeatPublisher(MemoryBroker(), "svc.a", 1.0, clock=clock, dependency=lambda: True)
    async with pub:
        assert shared_executor(clock).drain(WAIT)  # a blocking check: no self-wait
        assert pub.sent == 1


@pytest.mark.asyncio
async def test_a_check_ignoring_its_cancellation_stays_the_one_check_of_its_publisher() -> None:
    clock = hw.ManualClock()
    broker = MemoryBroker()
    messages: list[Any] = []
    broker.subscribe(">", messages.append)
    release = asyncio.Event()
    started = cancels = 0

    async def stubborn() -> bool:
        nonlocal started, cancels
        started += 1
        while True:
            try:
                await release.wait()
                return True
            except asyncio.CancelledError:
                cancels += 1  # swallowed: the check goes on

    rec = Recorder()
    pub = hw.HeartbeatPublisher(broker, "svc.a", 1.0, clock=clock, dependency=stubborn, timeout=0.5)
    pub.add_listener(rec)
    sched = shared_executor(clock)
    try:
        async with pub:
            await until(lambda: started == 1, "the first check running")
            clock.advance(0.5)  # its limit: cancelled, and it goes on
            await until(lambda: cancels == 1, "the check cancelled")
            assert await sched.adrain(WAIT)  # (given up on: not waited for)
            assert sched.stats()["abandoned_held"] == 1
            for _ in range(3):  # the beats at 1.0, 2.0, 3.0: no second check, each one fails
                for _ in range(2):
                    clock.advance(0.5)
                    assert await sched.adrain(WAIT)
            await until(lambda: len(rec.errors) == 4, "four failed beats reported")
            assert (started, cancels) == (1, 1)
            name = stubborn.__qualname__
            assert [e.detail for e in rec.errors] == [
                f"{name}: timed out after 0.5 s",
                f"{name}: timed out, still running after 1 s",
                f"{name}: timed out, still running after 2 s",
                f"{name}: timed out, still running after 3 s",
            ]
            assert pub.stats()["check_failures"] == 4
            release.set()  # it returns at last: its stale result sends nothing
            await until(lambda: sched.stats()["abandoned_held"] == 0, "the check ended")
            assert await sched.adrain(WAIT)
            assert messages == []
            clock.advance(1.0)  # the beat at 4.0 starts a check afresh
            assert await sched.adrain(WAIT)
            assert started == 2
            [msg] = messages
            beat = BeatCodec(None).decode(msg.body, msg.destination)
            assert (beat.seq, beat.state) == (1, "up")
    finally:
        release.set()  # (a failure above must not leave a task that outlives the loop)


def test_a_check_its_closed_loop_left_unfinished_ends_at_its_limit() -> None:
    """A loop closed without running its tasks to the end (``loop.close()``, not
    ``asyncio.run``) leaves the check pending for good: nothing would call back, so the
    cancel at its limit ends it; the next beat fails for want of a loop."""
    clock = hw.ManualClock()
    broker = MemoryBroker()
    messages: list[Any] = []
    broker.subscribe(">", messages.append)
    started = 0

    async def stuck() -> bool:
        nonlocal started
        started += 1
        await asyncio.Event().wait()
        return True

    pub = hw.HeartbeatPublisher(broker, "svc.a", 1.0, clock=clock, dependency=stuck, timeout=0.5)
    sched = shared_executor(clock)
    loop = asyncio.new_event_loop()

    async def begin() -> None:
        pub.start()
        await until(lambda: started == 1, "the check running")

    try:
        loop.run_until_complete(begin())
        loop.close()  # the check's task pending, never to run again
        clock.advance(0.5)  # its limit
        assert sched.drain(WAIT)
        assert sched.stats()["abandoned_held"] == 0
        clock.advance(0.5)  # the beat at 1.0: no loop to run the check on
        assert sched.drain(WAIT)
    finally:
        pub.stop()
    codec = BeatCodec(None)
    got = [codec.decode(m.body, m.destination) for m in messages]
    name = stuck.__qualname__
    assert [(b.seq, b.state, b.reason) for b in got] == [
        (1, "down", f"{name}: no event loop to run the coroutine check on")
    ]
