"""A member taking a shard over carries the snapshot's FAILED outages on (``monitor.adopt``):
one member on a real broker (ActiveMQ: nothing to declare), its monitor on a manual clock so
the event stream is exact. The snapshot it finds in the state queue was left by a previous
owner: a topic FAILED since 5.0 (5 periods missed), a live one, and one outside the member's
pattern (refused alone, the others still adopted)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.groups import (
    MonitorGroupMember,
    ShardLayout,
    ShardSnapshot,
    TopicRecord,
    publish_snapshot,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.monitor.test_monitor_semantics import Recorder

KEY = b"group-key"
WALL = 1_700_000_000.0  # the monitor's clock 0 as Unix seconds


def _wait(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.usefixtures("brokers")
def test_a_failed_topic_taken_over_fails_on_and_resumes_with_its_original_downtime() -> None:
    layout = ShardLayout(f"hwt{uuid.uuid4().hex[:8]}", 1)
    t = hw.connect(B.url("activemq") + "?heartbeat=1")
    assert isinstance(t, StompTransport)
    old = ShardSnapshot(
        layout,
        0,
        "old",
        1,
        time.time(),
        (
            TopicRecord("svc.dead", WALL + 5.0, 5, None, 1.0),
            TopicRecord("svc.live", None, 0, None, 1.0),
            TopicRecord("web.other", None, 0, None, 1.0),  # not the member's pattern
        ),
    )
    publish_snapshot(t, old, KEY, ttl=60)
    clock = hw.ManualClock()
    clock.advance(10.0)  # the takeover at 10.0
    rec = Recorder()
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, grace=0.0, clock=clock, wall_offset=WALL, listeners=[rec]
    )
    m = MonitorGroupMember(t, mon, layout, member="new", key=KEY).start()
    try:
        _wait("the snapshot to be read at the takeover", lambda: len(m.taken) == 1)
        assert m.taken[0][:4] == (0, "old", 3, 1)
        _wait("the records to be adopted", lambda: "svc.live" in mon, 5)
        assert m.refused == 1  # web.other, alone; the others adopted
        assert "web.other" not in mon
        assert mon.drain(5.0)
        # FAILED at once, without a new first failed: the old owner reported it.
        assert [e for e in rec.take() if e[0] != "started"] == []
        st = mon.status("svc.dead")
        assert (st.state.name, st.missed) == ("FAILED", 5)
        clock.advance(1.0)  # 11.0: one period after the takeover, on time
        assert mon.drain(5.0) and rec.take() == []
        clock.advance(0.001)
        assert mon.drain(5.0)
        assert sorted(rec.take()) == [
            ("failed", "svc.dead", 6, 11000, 5000),  # the outage counted on, same since
            ("failed", "svc.live", 1, 11000, 11000),  # a fresh start: a full period
        ]
        clock.advance(0.499)  # 11.5
        t.publish_sharded(layout, "svc.dead", BeatCodec().encode(Beat("svc.dead", period=1.0)))
        got: list[tuple[object, ...]] = []

        def resumed() -> bool:
            assert mon.drain(5.0)
            got.extend(rec.take())
            return bool(got)

        _wait("svc.dead's beat to resume it", resumed)
        # The downtime runs from the original failure (5.0), not from the takeover.
        assert got == [("resumed", "svc.dead", 6, 11500, 6500)]
    finally:
        m.stop()
        t.close()
