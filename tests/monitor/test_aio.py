"""asyncio on a monitor: ``async with``, ``async for ev in mon.events()`` (its overflow
policies, one loop wake-up per batch at most), ``await mon.wait_for(...)``; under the manual
clock (exact events) and over the embedded broker with a real publisher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

import heartwire as hw
from heartwire import State
from heartwire.aio import EventStream, StreamEvent

pytestmark = pytest.mark.asyncio

WAIT = 5.0  # seconds any single wait may take before the test fails


async def take(stream: EventStream, n: int) -> list[StreamEvent]:
    """The stream's next ``n`` events, each within WAIT seconds."""
    out: list[StreamEvent] = []
    for _ in range(n):
        try:
            out.append(await asyncio.wait_for(stream.__anext__(), WAIT))
        except asyncio.TimeoutError:
            raise AssertionError(f"no event within {WAIT} s after {out}") from None
    return out


async def rest(stream: EventStream) -> list[StreamEvent]:
    """Every event left until the stream ends (within WAIT seconds)."""

    async def gather() -> list[StreamEvent]:
        return [ev async for ev in stream]

    try:
        return await asyncio.wait_for(gather(), WAIT)
    except asyncio.TimeoutError:
        raise AssertionError(f"the stream did not end within {WAIT} s") from None


async def until(cond: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for a condition another thread makes true."""
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT} s")
        await asyncio.sleep(0.005)


def short(events: list[StreamEvent]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for ev in events:
        if isinstance(ev, hw.Failed):
            out.append(("failed", ev.topic, ev.missed, ev.at))
        elif isinstance(ev, hw.Resumed):
            out.append(("resumed", ev.topic, ev.missed, ev.at))
        else:
            out.append((type(ev).__name__, ev.at))
    return out


@pytest_asyncio.fixture
async def manual() -> AsyncIterator[tuple[hw.ManualClock, hw.HeartbeatMonitor]]:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon:
        yield clock, mon


# -- async with and async for, manual clock: exact events --------------------------------


async def test_async_with_starts_and_stops_and_the_stream_ends_after_the_last_event() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    async with mon as entered:
        assert entered is mon and mon.running
        mon.expect("svc.a")
        mon.expect("svc.b")
        stream = mon.events()
        clock.set(1.5)  # both missed their first period (due at 1.0)
        got = await take(stream, 2)
        assert short(got) == [("failed", "svc.a", 1, 1.0), ("failed", "svc.b", 1, 1.0)]
        mon.beat("svc.a")  # back at 1.5
        clock.set(2.5)  # svc.b misses again at 2.0
        got = await take(stream, 2)
        assert short(got) == [("resumed", "svc.a", 1, 1.5), ("failed", "svc.b", 2, 2.0)]
        # svc.a (heard at 1.5) misses at 2.5; svc.b's deadline 3.0 is not past yet. Then the
        # stop: the stream ends after that last event.
        clock.set(3.0)
        await mon.astop()
        assert short(await rest(stream)) == [("failed", "svc.a", 1, 2.5)]
        assert stream.closed
    assert not mon.running
    assert mon not in [listener for listener in mon.listeners if listener is stream]


async def test_stream_events_are_typed_and_carry_the_monitors_wall_offset(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    mon.expect("svc.a")
    stream = mon.events()
    clock.set(1.5)
    [ev] = await take(stream, 1)
    assert isinstance(ev, hw.Failed)
    assert ev.wall_at == pytest.approx(ev.at + mon.wall_offset)


async def test_the_loop_is_woken_at_most_once_per_batch(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    loop = asyncio.get_running_loop()
    calls = 0
    plain = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:  # counts the loop's cross-thread calls
        nonlocal calls
        calls += 1
        return plain(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        n = 5000
        for i in range(n):
            mon.expect(f"svc.{i}")
        stream = mon.events(capacity=n)
        waiting = asyncio.ensure_future(take(stream, n))
        await until(lambda: stream.waiting, "the consumer waits")  # before the events come
        clock.set(1.5)  # 5000 failures at once
        got = await waiting
    finally:
        loop.call_soon_threadsafe = plain  # type: ignore[method-assign]
    assert [ev.topic for ev in got if isinstance(ev, hw.Failed)] == [f"svc.{i}" for i in range(n)]
    assert 1 <= stream.wakeups <= stream.batches, (stream.wakeups, stream.batches)
    assert stream.batches < 100, f"{n} events came in {stream.batches} batches"
    assert calls == stream.wakeups, "a loop call other than the stream's wake-ups"


# -- back-pressure: the overflow policies --------------------------------------------------


@pytest_asyncio.fixture
async def ten(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> tuple[hw.ManualClock, hw.HeartbeatMonitor]:
    clock, mon = manual
    for i in range(10):
        mon.expect(f"svc.{i}")
    return clock, mon


async def test_drop_oldest_keeps_the_newest_capacity_events(
    ten: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = ten
    stream = mon.events(capacity=3, overflow="drop-oldest")
    clock.set(1.5)
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert (stream.queued, stream.dropped) == (3, 7)
    got = await take(stream, 3)
    assert short(got) == [("failed", f"svc.{i}", 1, 1.0) for i in (7, 8, 9)]
    assert stream.queued == 0


async def test_drop_newest_keeps_the_oldest_capacity_events(
    ten: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = ten
    stream = mon.events(capacity=3, overflow="drop-newest")
    clock.set(1.5)
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert (stream.queued, stream.dropped) == (3, 7)
    assert short(await take(stream, 3)) == [("failed", f"svc.{i}", 1, 1.0) for i in (0, 1, 2)]


async def test_coalesce_keeps_each_topics_newest_event_past_capacity(
    ten: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = ten
    stream = mon.events(capacity=3, overflow="coalesce")
    clock.set(1.5)  # ten failures (missed 1): 3 queued, 7 in the table, nothing lost
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert (stream.queued, stream.coalesced) == (10, 0)
    clock.set(2.5)  # ten more (missed 2): the table's 7 replaced, 3 added
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert (stream.queued, stream.coalesced, stream.dropped) == (13, 7, 0)
    got = await take(stream, 13)
    assert short(got) == [("failed", f"svc.{i}", 1, 1.0) for i in range(3)] + [
        ("failed", f"svc.{i}", 2, 2.0) for i in range(10)
    ]


async def test_block_loses_nothing_and_holds_the_streams_listener_thread(
    ten: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = ten
    stream = mon.events(capacity=3, overflow="block")
    clock.set(1.5)  # ten failures: a batch put in an empty stream goes in whole
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert stream.queued == 10
    clock.set(2.5)  # ten more: the stream's listener thread waits for room
    assert not await asyncio.to_thread(mon.drain, 0.2)
    assert stream.queued == 10
    got = await take(stream, 20)
    assert short(got) == [("failed", f"svc.{i}", 1, 1.0) for i in range(10)] + [
        ("failed", f"svc.{i}", 2, 2.0) for i in range(10)
    ]
    assert (stream.dropped, stream.coalesced) == (0, 0)
    assert await asyncio.to_thread(mon.drain, WAIT)


async def test_exit_closes_a_full_block_stream_nobody_reads() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    started = time.monotonic()
    async with mon:
        for i in range(10):
            mon.expect(f"svc.{i}")
        stream = mon.events(capacity=2, overflow="block")
        clock.set(1.5)
        await until(lambda: stream.queued >= 2, "the first events queued")
    # stop() did not wait out its timeout for the blocked listener thread
    assert time.monotonic() - started < 4.0
    assert stream.closed and not mon.running
    assert mon.stats()["listener_late"] == 0


async def test_aclose_ends_the_stream_and_leaves_the_listeners(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    mon.expect("svc.a")
    async with mon.events() as stream:
        assert stream in mon.listeners
    assert stream.closed and stream not in mon.listeners
    clock.set(1.5)
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert await rest(stream) == []


async def test_a_consumer_waiting_is_woken_by_aclose_from_another_task(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    _, mon = manual
    stream = mon.events()
    reader = asyncio.ensure_future(rest(stream))
    await asyncio.sleep(0.01)
    await stream.aclose()
    assert await reader == []


# -- bad input -----------------------------------------------------------------------------


async def test_events_bad_arguments(manual: tuple[hw.ManualClock, hw.HeartbeatMonitor]) -> None:
    _, mon = manual
    with pytest.raises(ValueError, match="capacity"):
        mon.events(capacity=0)
    with pytest.raises(ValueError, match=r"overflow.*'lossy'"):
        mon.events(overflow="lossy")  # type: ignore[arg-type]
    stream = mon.events()
    reader = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="another task is already waiting"):
        await stream.__anext__()
    reader.cancel()
    await stream.aclose()


async def test_events_on_a_monitor_not_running() -> None:
    mon = hw.HeartbeatMonitor(None, "svc.>")
    with pytest.raises(RuntimeError, match=r"monitor of 'svc\.>' is not running"):
        mon.events()
    assert mon.listeners == []


async def test_events_with_no_loop_running(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    _, mon = manual
    with pytest.raises(RuntimeError, match="no running event loop"):
        await asyncio.to_thread(mon.events)  # a thread with no loop


# -- wait_for ------------------------------------------------------------------------------


async def test_wait_for_returns_at_once_when_the_topic_is_in_that_state(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    _, mon = manual
    mon.beat("svc.a")
    status = await mon.wait_for("svc.a", State.ALIVE, timeout=0)
    assert (status.topic, status.state, status.last_seen) == ("svc.a", State.ALIVE, 0.0)


async def test_wait_for_alive_from_pending_and_from_unknown(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    mon.expect("svc.a")
    pending = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
    unknown = asyncio.ensure_future(mon.wait_for("svc.new", State.ALIVE, timeout=WAIT))
    await asyncio.sleep(0.01)
    assert not pending.done() and not unknown.done()
    clock.set(0.25)
    mon.beat("svc.a")
    mon.beat("svc.new")
    a, new = await pending, await unknown
    assert mon.stats()["received"] == 2  # only beats announce these: asked for meanwhile
    assert (a.state, a.last_seen, new.state, new.last_seen) == (
        State.ALIVE,
        0.25,
        State.ALIVE,
        0.25,
    )


async def test_wait_for_failed_then_alive_again(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    mon.beat("svc.a")
    failed = asyncio.ensure_future(mon.wait_for("svc.a", State.FAILED, timeout=WAIT))
    await asyncio.sleep(0.01)
    clock.set(1.5)
    status = await failed
    assert (status.state, status.missed, status.failed_since) == (State.FAILED, 1, 1.0)
    alive = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
    await asyncio.sleep(0.01)
    mon.beat("svc.a")
    status = await alive
    assert (status.state, status.last_seen) == (State.ALIVE, 1.5)
    # a FAILED topic announces its recovery: no received events were asked of the core
    assert mon.stats()["received"] == 0
    # the waits left the listeners (and the monitor stopped asking for received events)
    assert mon.listeners == []


async def test_wait_for_alive_on_a_paused_topic_is_woken_by_resume(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    _, mon = manual
    mon.beat("svc.a")
    assert mon.pause("svc.a")
    alive = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
    await asyncio.sleep(0.01)
    assert not alive.done()
    assert mon.resume("svc.a")  # no event says so: resume() wakes the waiters
    assert (await alive).state is State.ALIVE


async def test_wait_for_times_out_naming_the_topic_and_both_states(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    _, mon = manual
    mon.expect("svc.a")
    with pytest.raises(TimeoutError, match=r"topic 'svc\.a' not FAILED after 0\.05 s "):
        await mon.wait_for("svc.a", State.FAILED, timeout=0.05)
    with pytest.raises(TimeoutError, match=r"\(it is State\.PENDING\)"):
        await mon.wait_for("svc.a", State.ALIVE, timeout=0.05)
    with pytest.raises(
        TimeoutError, match=r"topic 'svc\.x' not ALIVE after 0 s \(it is not watched"
    ):
        await mon.wait_for("svc.x", State.ALIVE, timeout=0)
    assert mon.listeners == []


async def test_wait_for_bad_arguments(manual: tuple[hw.ManualClock, hw.HeartbeatMonitor]) -> None:
    _, mon = manual
    with pytest.raises(ValueError, match=r"got State\.PAUSED"):
        await mon.wait_for("svc.a", State.PAUSED, timeout=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"state must be a heartwire\.State, got str 'ALIVE'"):
        await mon.wait_for("svc.a", "ALIVE", timeout=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        await mon.wait_for("svc.a", State.ALIVE, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        await mon.wait_for("svc.a", State.ALIVE, timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topic"):
        await mon.wait_for("svc..a", State.ALIVE, timeout=1)
    assert mon.listeners == []


# -- over the embedded broker, real clock ----------------------------------------------------


async def test_embedded_broker_publisher_and_monitor_under_async_with() -> None:
    broker = hw.connect()
    try:
        mon = hw.HeartbeatMonitor(broker, "svc.>", period=0.05, allowed_misses=2)
        async with mon:
            stream = mon.events()
            async with hw.HeartbeatPublisher(broker, "svc.api", period=0.05) as pub:
                status = await mon.wait_for("svc.api", State.ALIVE, timeout=WAIT)
                assert status.period == 0.05
            assert not pub.running
            status = await mon.wait_for("svc.api", State.FAILED, timeout=WAIT)
            assert status.missed >= 2
            [ev] = await take(stream, 1)
            assert isinstance(ev, hw.Failed)
            assert (ev.topic, ev.missed) == ("svc.api", 2)
    finally:
        broker.close()


async def test_wait_for_wakes_the_loop_only_when_the_state_is_reached(
    manual: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = manual
    mon.expect("svc.a", period=3.0)
    mon.expect("svc.b")
    loop = asyncio.get_running_loop()
    calls = 0
    plain = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:  # counts the loop's cross-thread calls
        nonlocal calls
        calls += 1
        return plain(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        failed = asyncio.ensure_future(mon.wait_for("svc.a", State.FAILED, timeout=WAIT))
        await asyncio.sleep(0.01)
        clock.set(2.5)  # svc.b fails at 1.0 and 2.0: batches, but svc.a is not FAILED
        # (drain on the loop's thread: the listeners need no loop, and to_thread would make
        # a loop call of its own)
        assert mon.drain(WAIT)
        assert calls == 0 and not failed.done()
        clock.set(3.5)  # svc.a fails at 3.0
        status = await failed
    finally:
        loop.call_soon_threadsafe = plain  # type: ignore[method-assign]
    assert (status.topic, status.failed_since) == ("svc.a", 3.0)
    assert calls == 1


async def test_wait_for_on_a_monitor_not_running_or_stopping_meanwhile() -> None:
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(None, "svc.>", clock=clock, period=1.0, grace=0.0)
    with pytest.raises(RuntimeError, match=r"monitor of 'svc\.>' is not running"):
        await mon.wait_for("svc.a", State.ALIVE, timeout=WAIT)
    async with mon:
        mon.expect("svc.a")
        alive = asyncio.ensure_future(mon.wait_for("svc.a", State.ALIVE, timeout=WAIT))
        await asyncio.sleep(0.01)
        await mon.astop()
        with pytest.raises(
            RuntimeError,
            match=r"stopped while waiting for topic 'svc\.a' to be ALIVE \(it is State\.",
        ):
            await alive
    assert mon.listeners == []


async def test_a_stream_on_a_monitor_without_listener_queues() -> None:
    # listener_queue=None: the stream is called on the dispatch thread
    clock = hw.ManualClock()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", clock=clock, period=1.0, grace=0.0, listener_queue=None
    )
    async with mon:
        mon.expect("svc.a")
        stream = mon.events(capacity=1, overflow="drop-newest")
        clock.set(2.5)  # missed at 1.0 and 2.0
        assert await asyncio.to_thread(mon.drain, WAIT)
        got = await take(stream, 1)
        assert short(got) == [("failed", "svc.a", 1, 1.0)]
        assert stream.dropped == 1  # (in one batch or two: the later event does not fit)


async def test_events_in_hand_are_not_dropped(
    ten: tuple[hw.ManualClock, hw.HeartbeatMonitor],
) -> None:
    clock, mon = ten
    stream = mon.events(capacity=10, overflow="drop-oldest")
    clock.set(1.5)  # ten failures (missed 1): one run of the detector, one batch
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert stream.batches == 1
    first = await take(stream, 1)  # the batch is in hand now, out of the queue
    clock.set(2.5)  # ten more (missed 2): room for all ten, nothing dropped
    assert await asyncio.to_thread(mon.drain, WAIT)
    assert (stream.queued, stream.dropped) == (19, 0)
    got = first + await take(stream, 19)
    assert short(got) == [("failed", f"svc.{i}", 1, 1.0) for i in range(10)] + [
        ("failed", f"svc.{i}", 2, 2.0) for i in range(10)
    ]
