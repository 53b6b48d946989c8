"""asyncio on a monitor, the edges (review 19): a stream whose loop closed unread, a state
announced and left again before the waiter looks, a waiter following its topic after resume()
and remove(), a cancel during ``async with`` entry, and a loop never blocked on the monitor's
lock while start()/stop() are on a slow broker. Manual clock; the slow broker is the embedded
one with a subscribe/cancel held on an event."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire import State
from heartwire.aio import EventStream
from heartwire.transport.memory import MemoryBroker

WAIT = 5.0  # seconds any single wait may take before the test fails
STREAM_THREAD = "heartwire-listener[EventStream]"


def _stream_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in set(threading.enumerate()) - before if t.name == STREAM_THREAD]


def _wait_gone(before: set[threading.Thread]) -> list[str]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and _stream_threads(before):
        time.sleep(0.01)
    return _stream_threads(before)


# -- a stream whose loop closed (finding 3) ------------------------------------------------


def test_a_full_block_stream_whose_loop_closes_lets_stop_end_its_thread() -> None:
    """The put waits for room in a full "block" stream when the loop closes: nobody will
    make room or call back; the put sees the closed loop itself and the stream closes."""
    before = set(threading.enumerate())
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    mon.start()
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        for i in range(3):
            mon.expect(f"svc.{i}")

        async def make() -> EventStream:
            return mon.events(capacity=1, overflow="block")

        stream = asyncio.run_coroutine_threadsafe(make(), loop).result(WAIT)
        clock.set(1.5)  # three failures: one batch, in whole (the stream is empty)
        assert mon.drain(WAIT)
        assert stream.queued == 3
        clock.set(2.5)  # three more: no room, the stream's put waits (its thread is held)
        assert not mon.drain(0.1)
        loop.call_soon_threadsafe(loop.stop)
        runner.join(WAIT)
        loop.close()  # nobody read the stream, nobody will
        deadline = time.monotonic() + WAIT
        while not stream.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.closed, "a full block stream whose loop closed stayed open"
        assert stream not in mon.listeners
        assert (stream.dropped, stream.queued) == (6, 0)  # the three queued, the three refused
    finally:
        began = time.monotonic()
        mon.stop(timeout=WAIT)
        took = time.monotonic() - began
    assert took < 1.0, f"stop() took {took:.2f} s"
    assert not _wait_gone(before)


def test_a_block_stream_whose_loop_closed_unread_lets_stop_end_its_thread() -> None:
    """Review 19's case: made in asyncio.run and left; batches past its capacity follow."""
    before = set(threading.enumerate())
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    mon.start()
    try:
        for i in range(3):
            mon.expect(f"svc.{i}")
        made: list[EventStream] = []

        async def main() -> None:
            made.append(mon.events(capacity=1, overflow="block"))

        asyncio.run(main())
        for k in range(1, 4):
            clock.set(k + 0.5)
        assert mon.drain(WAIT)
    finally:
        began = time.monotonic()
        mon.stop(timeout=WAIT)
        took = time.monotonic() - began
    assert took < 1.0, f"stop() took {took:.2f} s"
    assert not _wait_gone(before)
    assert made[0].closed and made[0] not in mon.listeners
    # the first batch (how many events it holds depends on the dispatch's batching), counted;
    # the stream was closed for the others
    assert made[0].dropped in (3, 6, 9), made[0].dropped


@pytest.mark.parametrize("overflow", ["drop-oldest", "coalesce"])
def test_a_stream_whose_loop_closed_leaves_at_its_next_batch(overflow: Any) -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    mon.start()
    try:
        mon.expect("svc.a")
        made: list[EventStream] = []

        async def main() -> None:
            made.append(mon.events(capacity=10, overflow=overflow))

        asyncio.run(main())
        [stream] = made
        assert stream in mon.listeners
        clock.set(1.5)
        assert mon.drain(WAIT)
        assert stream.closed and stream not in mon.listeners
        assert (stream.dropped, stream.queued) == (1, 0)
    finally:
        mon.stop()


def test_a_stream_whose_loop_closed_with_no_batch_is_closed_by_stop() -> None:
    before = set(threading.enumerate())
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=hw.ManualClock(), period=1.0)
    mon.start()
    made: list[EventStream] = []

    async def main() -> None:
        made.append(mon.events())

    asyncio.run(main())
    mon.stop()
    assert made[0].closed and made[0] not in mon.listeners
    assert not _wait_gone(before)


# -- a state announced, then left, before the waiter looks (finding 4) -----------------------


@pytest.mark.asyncio
async def test_wait_for_failed_returns_when_a_failed_event_was_announced() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        mon.beat("svc.a")
        stream = mon.events()
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.FAILED, timeout=WAIT))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        clock.set(1.5)  # the period ended at 1.0 with no beat: Failed
        mon.beat("svc.a")  # and back at 1.5: Resumed (no await in between)
        got = [type(await asyncio.wait_for(anext(stream), WAIT)).__name__ for _ in range(2)]
        assert got == ["Failed", "Resumed"]
        status = await waiting
        assert (status.topic, status.state, status.missed, status.failed_since) == (
            "svc.a",
            State.FAILED,
            1,
            1.0,
        )
        assert mon.status("svc.a").state is State.ALIVE  # and it has left it since
    assert mon.listeners == []


@pytest.mark.asyncio
async def test_wait_for_alive_returns_when_a_resumed_event_was_announced() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        mon.beat("svc.a")
        clock.set(1.5)
        status = await mon.wait_for("svc.a", State.FAILED, timeout=WAIT)
        assert status.failed_since == 1.0
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        mon.beat("svc.a")  # Resumed at 1.5
        clock.set(3.5)  # and failed again at 2.5 (no await in between)
        status = await waiting
        assert (status.state, status.missed, status.failed_since, status.last_seen) == (
            State.ALIVE,
            0,
            None,
            1.5,
        )
        assert mon.status("svc.a").state is State.FAILED


# -- the waiter follows its topic (finding 5) ------------------------------------------------


@pytest.mark.asyncio
async def test_wait_for_alive_on_a_paused_never_heard_topic_wakes_on_its_first_beat() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        mon.expect("svc.a")
        mon.pause("svc.a")
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.05)  # registered, PAUSED seen: no received events asked for
        assert not waiting.done()
        assert mon.stats()["received"] == 0
        mon.resume("svc.a")  # PENDING again: the waiter now asks for received events
        await asyncio.sleep(0.05)
        assert mon.status("svc.a").state is State.PENDING and not waiting.done()
        mon.beat("svc.a")  # ALIVE with no event but a received one
        status = await waiting
        assert (status.state, status.last_seen) == (State.ALIVE, 0.0)
    assert mon.listeners == []


@pytest.mark.asyncio
async def test_wait_for_alive_on_a_failed_topic_removed_then_heard_again() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        mon.beat("svc.a")
        clock.set(1.5)
        await mon.wait_for("svc.a", State.FAILED, timeout=WAIT)
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.05)  # FAILED: a Resumed will say it, no received events
        assert mon.remove("svc.a")  # unknown now: learned again by a beat, with no Resumed
        await asyncio.sleep(0.05)
        assert not waiting.done()
        mon.beat("svc.a")
        status = await waiting
        assert (status.state, status.last_seen) == (State.ALIVE, 1.5)


# -- a cancel during `async with` entry (finding 6) ------------------------------------------


@pytest.mark.asyncio
async def test_a_task_cancelled_while_entering_async_with_leaves_no_monitor_running() -> None:
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=hw.ManualClock(), period=1.0)

    async def body() -> None:
        async with mon:
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(body())
    await asyncio.sleep(0)  # the task awaits start() on its thread
    task.cancel()
    (outcome,) = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)
    try:
        assert not mon.running, "the cancelled `async with` left the monitor running"
        await asyncio.sleep(0.3)  # a start() still going on its thread would be done by now
        assert not mon.running, "the cancelled `async with` left the monitor running"
    finally:
        mon.stop()


class SlowBroker(MemoryBroker):
    """The embedded broker whose subscribe and cancel wait for ``gate`` (a broker slow to
    answer): start() and stop() hold the monitor's lock across them."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.inside = threading.Event()

    def subscribe(self, pattern: str, handler: Any) -> Any:
        self.inside.set()
        assert self.gate.wait(WAIT)
        return _SlowSubscription(self, super().subscribe(pattern, handler))


class _SlowSubscription:
    def __init__(self, broker: SlowBroker, sub: Any) -> None:
        self._broker = broker
        self._sub = sub

    def cancel(self) -> None:
        self._broker.inside.set()
        assert self._broker.gate.wait(WAIT)
        self._sub.cancel()


@pytest.mark.asyncio
async def test_a_cancel_while_start_is_on_a_slow_broker_waits_for_it_then_stops_it() -> None:
    broker = SlowBroker()
    mon = hw.HeartbeatMonitor(broker, "svc.>", clock=hw.ManualClock(), period=1.0)

    async def body() -> None:
        async with mon:
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(body())
    assert await asyncio.to_thread(broker.inside.wait, WAIT)  # start() is subscribing
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # the entry waits for the start it began, to undo it
    broker.inside.clear()
    broker.gate.set()
    (outcome,) = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)
    assert not mon.running


# -- the loop never waits for the monitor's lock (suspected 11) ------------------------------


@pytest.mark.asyncio
async def test_the_loop_is_not_blocked_while_stop_is_on_a_slow_broker() -> None:
    broker = SlowBroker()
    broker.gate.set()
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(broker, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        mon.expect("svc.a")
        stream = mon.events()
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.05)
        broker.gate.clear()
        broker.inside.clear()
        stopping = asyncio.ensure_future(mon.astop())
        assert await asyncio.to_thread(broker.inside.wait, WAIT)  # stop() holds the lock
        # Each of these would wait for the monitor's lock on the loop's thread: timed.
        began = time.monotonic()
        with pytest.raises(RuntimeError, match="is not running"):
            mon.events()
        with pytest.raises(RuntimeError, match="is not running"):
            await mon.wait_for("svc.b", State.ALIVE, timeout=WAIT)
        await stream.aclose()
        took = time.monotonic() - began
        broker.gate.set()
        await stopping
        with pytest.raises(RuntimeError, match="stopped while waiting"):
            await waiting
    assert took < 0.5, f"the loop waited {took:.2f} s for stop()'s lock"
    assert mon.listeners == []


@pytest.mark.asyncio
async def test_the_loop_is_not_blocked_while_start_is_on_a_slow_broker() -> None:
    broker = SlowBroker()
    mon = hw.HeartbeatMonitor(broker, "svc.>", clock=hw.ManualClock(), period=1.0)
    entering = asyncio.ensure_future(mon.__aenter__())
    assert await asyncio.to_thread(broker.inside.wait, WAIT)  # start() holds the lock
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="is not running"):
        mon.events()
    with pytest.raises(RuntimeError, match="is not running"):
        await mon.wait_for("svc.a", State.ALIVE, timeout=WAIT)
    took = time.monotonic() - began
    broker.gate.set()
    await entering
    try:
        assert took < 0.5, f"the loop waited {took:.2f} s for start()'s lock"
        waiting = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.05)
        mon.beat("svc.a")  # a received waiter: the feed switch was made off the loop
        assert (await waiting).state is State.ALIVE
    finally:
        await mon.__aexit__(None, None, None)
    assert mon.listeners == []
