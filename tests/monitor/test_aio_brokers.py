"""asyncio over a real broker (ActiveMQ): ``async with`` starts and stops a monitor over STOMP
off the loop, a publisher's coroutine check runs on the test's loop, and its down beat reaches
``async for`` as a ``Failed`` with the reason, within a period."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import heartwire as hw
from heartwire import State, connect
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

pytestmark = [pytest.mark.usefixtures("brokers"), pytest.mark.asyncio]

FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=2&keepalive_interval=0"
WAIT = 5.0


async def next_of(stream: hw.EventStream, kind: type[Any]) -> Any:
    """The stream's next event of ``kind`` (others skipped), within WAIT seconds."""

    async def find() -> Any:
        async for event in stream:
            if isinstance(event, kind):
                return event
        raise AssertionError(f"the stream ended before a {kind.__name__}")

    try:
        return await asyncio.wait_for(find(), WAIT)
    except asyncio.TimeoutError:
        raise AssertionError(f"no {kind.__name__} within {WAIT} s") from None


async def test_coroutine_check_down_beat_reaches_async_for_over_activemq(
    closing: list[Any],
) -> None:
    B.ensure("activemq")
    root = f"x{uuid.uuid4().hex[:10]}"
    topic = f"{root}.api"
    mon_t = connect(B.url("activemq") + "?" + FAST)
    pub_t = connect(B.url("activemq") + "?" + FAST)
    closing.extend([mon_t, pub_t])
    healthy = True
    loop = asyncio.get_running_loop()
    ran_on: set[asyncio.AbstractEventLoop] = set()

    async def check() -> bool:
        ran_on.add(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return healthy

    # Failures by missed periods would need 20 of them: only the down beat fails the topic.
    mon = hw.HeartbeatMonitor(mon_t, f"{root}.>", period=0.2, allowed_misses=20)
    async with mon:
        stream = mon.events()
        async with hw.HeartbeatPublisher(pub_t, topic, 0.2, dependency=check):
            status = await mon.wait_for(topic, State.ALIVE, timeout=WAIT)
            assert status.period == 0.2
            healthy = False
            failed = await next_of(stream, hw.Failed)
            assert (failed.topic, failed.missed) == (topic, 0)
            assert failed.reason == f"{check.__qualname__} returned False"
            healthy = True
            resumed = await next_of(stream, hw.Resumed)
            assert resumed.topic == topic
    assert not mon.running
    assert ran_on == {loop}
