"""Edges of the integrated group member found by a second review (issue 18): stop() bounded
with the broker gone, a snapshot in the queue preferred to the member's own memory, the
alerting marks in the member's snapshots, group_status after a leaving status, a status dated
ahead. Each failed before its fix. Real brokers, bounded waits."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from types import SimpleNamespace

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.groups import (
    MemberStatus,
    MonitorGroupMember,
    ShardLayout,
    ShardSnapshot,
    TopicRecord,
    _encode_status,
    group_status,
    publish_snapshot,
    read_snapshot,
    snapshot_of,
    status_topic,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.proxy import TcpProxy

KEY = b"group-key"


def _wait(what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _layout(shards: int) -> ShardLayout:
    return ShardLayout(f"hwr{uuid.uuid4().hex[:8]}", shards)


def _connect(url: str) -> StompTransport:
    t = hw.connect(url)
    assert isinstance(t, StompTransport)
    return t


def _takeover_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("heartwire-group-takeover-")]


def _worker(name: str) -> threading.Thread | None:
    for th in threading.enumerate():
        if th.name == f"heartwire-group-{name}":
            return th
    return None


# -- R1: stop() with the connection down ------------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_r1_stop_is_bounded_and_leaves_no_worker_when_the_broker_is_gone() -> None:
    """The broker goes away while the member owns 4 shards (period 2 s). Its worker's tick
    round then waits up to a period per shard (send_to waits for a reconnection): 8 s. stop(1)
    first sends the leaving status (up to a period: 2 s, not bounded by ``timeout``), joins the
    worker for another full ``timeout``, gives up on it and returns: after ~3 s, with the worker
    still running (it goes on to send snapshots, a status, and can rebalance)."""
    lay = _layout(4)
    proxy = TcpProxy(("127.0.0.1", 61613))
    t = _connect(proxy.url + "?heartbeat=1&reconnect_interval=0.3")
    mon = hw.HeartbeatMonitor(None, "svc.>", period=2.0)
    a = MonitorGroupMember(t, mon, lay, member="r1a", key=KEY, balance=False).start()
    worker = _worker("r1a")
    try:
        _wait("r1a to own the 4 shards", lambda: len(a.owned) == 4, 15)
        proxy.close()  # the broker is gone (connections refused)
        _wait(
            "the worker to be held up in its tick round", lambda: a.failures.get("tick", 0) >= 1, 15
        )
        start = time.monotonic()
        a.stop(timeout=1.0)
        took = time.monotonic() - start
        left = worker is not None and worker.is_alive()
        assert not left and took <= 1.5, (
            f"stop(timeout=1.0) took {took:.2f} s and left the worker running: {left}"
        )
    finally:
        t.close()
        proxy.stop()
        if worker is not None:
            worker.join(20)


# -- R2: the member's own last snapshot preferred over a newer one of another member ----------


@pytest.mark.usefixtures("brokers")
def test_r2_own_last_snapshot_does_not_override_another_members_newer_one() -> None:
    """Member a loses its shard (connection dropped). Meanwhile another member (b, whose clock
    is 50 ms behind a's: the group allows 60 s of skew) publishes the shard's state, with a
    FAILED topic a never knew. a owns the shard again and reads b's snapshot, but its fallback
    compares wall clocks across hosts (``mine.sent > snap.sent``) and adopts its own older
    state instead; its settle then ACKs (consumes) b's: svc.y's outage is gone from the group
    (never alerted again)."""
    lay = _layout(1)
    t = _connect(B.url("activemq") + "?heartbeat=1&reconnect_interval=0.3")
    other = _connect(B.url("activemq"))
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    # a's periodic snapshots live 50 ms: the queue holds only b's when a reads it again.
    a = MonitorGroupMember(t, mon, lay, member="r2a", key=KEY, periodic_snapshot_ttl=0.05)
    a.start()
    try:
        _wait("r2a to take shard 0 over", lambda: a.takeovers >= 1 and len(a.taken) >= 1)
        _wait("r2a's own snapshot of shard 0", lambda: 0 in a._last_own)
        time.sleep(0.6)  # a periodic snapshot more
        link = t.current_link
        assert link is not None
        link.abort("review: connection lost")
        mine = a._last_own[0]
        b = ShardSnapshot(
            lay,
            0,
            "r2b",
            1,
            mine.sent - 0.05,  # b's clock 50 ms behind a's; sent after a lost the shard
            (TopicRecord("svc.y", failed_since=time.time() - 5, missed=3, period=0.5),),
        )
        publish_snapshot(other, b, KEY, ttl=60)
        _wait("r2a to take shard 0 over again", lambda: len(a.taken) >= 2, 15)
        _wait("the takeover read to end", lambda: not _takeover_threads(), 10)
        by = a.taken[-1][1]
        assert by == "r2b" and "svc.y" in mon, (
            f"took shard 0 over from {by!r}'s snapshot; svc.y known: {'svc.y' in mon}"
        )
    finally:
        a.stop()
        t.close()
        other.close()


# -- R3: the member's snapshots drop the detector's marks --------------------------------------


@pytest.mark.usefixtures("brokers")
def test_r3_member_snapshots_carry_the_suppression_marks() -> None:
    """svc.child fails while its parent svc.db is FAILED: its Failed went out suppressed
    (``suppressed_by='svc.db'``, no unmarked alert). ``snapshot_of`` carries that mark, so the
    next owner would send the child's Failed when svc.db resumes; the member's own snapshots
    (``_shard_records(..., marks=False)``) write the default marks (alerted), so the next owner
    never alerts the child: a lost failed event across the handover."""
    lay = _layout(1)
    t = _connect(B.url("activemq") + "?heartbeat=1")
    reader = _connect(B.url("activemq"))
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    mon.depends("svc.child", on="svc.db")
    a = MonitorGroupMember(t, mon, lay, member="r3a", key=KEY).start()
    try:
        _wait("r3a to take shard 0 over", lambda: a.takeovers >= 1 and len(a.taken) >= 1)
        mon.expect("svc.db")
        _wait("svc.db to fail", lambda: mon.status("svc.db").state == "FAILED")
        mon.expect("svc.child")
        _wait("svc.child to fail", lambda: mon.status("svc.child").state == "FAILED")
        truth = {r.topic: r for r in snapshot_of(mon, lay, 0, member="x", seq=0).topics}
        assert truth["svc.child"].suppressed_by == "svc.db"  # the premise: the mark is there
        time.sleep(1.2)  # two periods: the member's snapshots with both outages are out
        snap, refused = read_snapshot(reader, lay, 0, KEY, wait=3.0)
        assert snap is not None, refused
        got = {r.topic: r for r in snap.topics}
        child = got["svc.child"]
        assert (child.alerted, child.suppressed_by) == (False, "svc.db"), child
    finally:
        a.stop()
        t.close()
        reader.close()


# -- R4: group_status counts a member after its leaving status ---------------------------------


@pytest.mark.usefixtures("brokers")
def test_r4_group_status_leaves_out_a_member_after_it_said_it_left() -> None:
    """stop() sends the leaving status while the worker still runs (it is joined after): a
    status the worker built after it follows (same incarnation, newer ``sent``). The members
    refuse it (``left``); group_status keeps the newest and shows the stopped member, with its
    shards."""
    lay = _layout(2)
    t = _connect(B.url("activemq"))
    codec = BeatCodec(KEY)
    out: list[object] = []

    def listen() -> None:
        out.append(group_status(t, lay.group, key=KEY, wait=2.0))

    th = threading.Thread(target=listen)
    th.start()
    try:
        time.sleep(0.7)  # subscribed
        now = time.time()
        inc = uuid.uuid4().hex
        leaving = MemberStatus("r4m", (), {}, 1.0, now, incarnation=inc, leaving=True)
        late = MemberStatus(
            "r4m",
            (0, 1),
            {"ALIVE": 3},
            1.0,
            now + 0.01,
            incarnation=inc,
            shard_counts={0: {"ALIVE": 1}, 1: {"ALIVE": 2}},
        )
        for st in (leaving, late):
            t.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)
        th.join(10)
        assert out, "group_status did not return"
        gs = out[0]
        assert "r4m" not in gs.members, gs.members  # type: ignore[attr-defined]
    finally:
        th.join(10)
        t.close()


# -- R5: a status from ahead of the clock silences its member ----------------------------------


@pytest.mark.usefixtures("brokers")
def test_r5_a_status_sent_ahead_does_not_refuse_the_members_later_ones() -> None:
    """The stale check looks one way only (``wall - sent > window``): a status whose ``sent``
    is an hour ahead (its host's clock stepped forward, then back) is taken, and becomes the
    ``replayed`` bar for that member: each of its later, correct statuses is refused for an
    hour and the member is not counted (decode_snapshot checks ``sent`` both ways)."""
    lay = _layout(2)
    t = _connect(B.url("activemq"))
    mon = hw.HeartbeatMonitor(None, "svc.>", period=1.0)
    m = MonitorGroupMember(t, mon, lay, member="r5m", key=KEY)  # not started: its filter only
    codec = BeatCodec(KEY)
    inc = uuid.uuid4().hex

    def status(sent: float) -> SimpleNamespace:
        st = MemberStatus("r5x", (1,), {"ALIVE": 1}, 1.0, sent, incarnation=inc)
        return SimpleNamespace(body=_encode_status(lay, st, codec), headers={})

    try:
        m._on_status(status(time.time() + 3600))  # the clock an hour ahead, once
        m._on_status(status(time.time()))  # the clock right again: a fresh status
        assert m.statuses_refused.get("replayed", 0) == 0, m.statuses_refused
        assert m._members["r5x"][1].sent <= time.time() + 60, "a status from an hour ahead kept"
    finally:
        t.close()
