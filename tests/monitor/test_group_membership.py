"""Who a group member counts as a member (review 18 of the member, findings 3, 10, 11, S3, S5,
S8): statuses too old or replayed refused and counted, members aged by their own period, the
leaving status stop() sends, the table pruned and capped, two members under one name told
apart and reported, releases backing off when they come straight back, each worker step tried
on its own, and sweeps on the worker's thread only. Real brokers, bounded waits."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import heartwire as hw
from heartwire import groups
from heartwire.beat import BeatCodec
from heartwire.groups import (
    MemberStatus,
    MonitorGroupMember,
    ShardLayout,
    SnapshotError,
    _decode_status,
    _encode_status,
    group_status,
    status_topic,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)
from tests.monitor.group_util import KEY
from tests.monitor.group_util import close as _close
from tests.monitor.group_util import connect as _transport
from tests.monitor.group_util import new_layout as _layout
from tests.monitor.group_util import new_member as _member
from tests.monitor.group_util import wait as _wait


def _status(lay: ShardLayout, st: MemberStatus, key: bytes = KEY) -> SimpleNamespace:
    """A status message as the transport hands it to the member's handler."""
    return SimpleNamespace(body=_encode_status(lay, st, BeatCodec(key)), headers={})


@pytest.fixture
def idle() -> Iterator[MonitorGroupMember]:
    """A member built but not started (its status handler is fed directly): no worker."""
    lay = ShardLayout(f"hwm{uuid.uuid4().hex[:8]}", 4)
    t = hw.connect(B.url("activemq"))
    assert isinstance(t, StompTransport)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    m = MonitorGroupMember(t, mon, lay, member="me", key=KEY)
    yield m
    t.close()


# -- the status message: incarnation and leaving (optional fields) --------------------------


def test_a_status_carries_the_incarnation_and_leaving_and_older_ones_still_decode() -> None:
    lay = ShardLayout("payments", 4)
    codec = BeatCodec(KEY)
    st = MemberStatus("m1", (0, 2), {"ALIVE": 3}, 1.0, 1764000000.0, "ab12", True)
    assert _decode_status(_encode_status(lay, st, codec), lay, codec) == st
    # A member of an older heartwire sends neither field.
    old = codec.seal(
        {"hwgroup": 1, "group": "payments", "shards": 4, "member": "m1", "owned": [1]}
        | {"counts": {}, "period": 1.0, "sent": 1764000000.0}
    )
    assert _decode_status(old, lay, codec) == MemberStatus("m1", (1,), {}, 1.0, 1764000000.0)
    for field, value in [("incarnation", "a b"), ("incarnation", 7), ("leaving", 1)]:
        body = codec.seal(
            {"hwgroup": 1, "group": "payments", "shards": 4, "member": "m1", "owned": []}
            | {"counts": {}, "period": 1.0, "sent": 1.0, field: value}
        )
        with pytest.raises(SnapshotError, match=field) as info:
            _decode_status(body, lay, codec)
        assert info.value.reason == "malformed"


# -- finding 3: statuses too old, replayed, of a member that left ---------------------------


@pytest.mark.usefixtures("brokers")
def test_statuses_refused_by_reason(idle: MonitorGroupMember) -> None:
    """Each refusal counted by reason, none of them counted as a member."""
    m, lay, now = idle, idle.layout, time.time()
    # 3 of its 0.5 s periods plus the allowed skew old: refused as stale.
    m._on_status(
        _status(lay, MemberStatus("old", (), {}, 0.5, now - 1.5 - groups.STATUS_AGE_SKEW - 1))
    )
    # Within the window of its own (longer) period: counted.
    m._on_status(_status(lay, MemberStatus("slow", (), {}, 30.0, now - 60.0, "s1")))
    fresh = MemberStatus("b", (1,), {}, 0.5, now, "b1")
    m._on_status(_status(lay, fresh))
    m._on_status(_status(lay, fresh))  # the same one again: replayed, does not refresh it
    m._on_status(_status(lay, MemberStatus("b", (), {}, 0.5, now + 0.1, "b1", leaving=True)))
    m._on_status(_status(lay, MemberStatus("b", (1,), {}, 0.5, now + 0.2, "b1")))  # after it left
    m._on_status(_status(lay, fresh, key=b"other"))
    assert m.statuses_refused == {"stale": 1, "replayed": 1, "left": 1, "bad_signature": 1}
    assert m.refused == 4
    assert set(m.members()) == {"me", "slow"}
    # b again under a new incarnation (restarted): a member again.
    m._on_status(_status(lay, MemberStatus("b", (1,), {}, 0.5, now + 0.3, "b2")))
    assert set(m.members()) == {"me", "slow", "b"}
    # Forgotten once aged out, a replay of its last status is still refused (not counted anew).
    m._prune(time.monotonic() + 10)
    assert "b" not in m._members
    m._on_status(_status(lay, MemberStatus("b", (1,), {}, 0.5, now + 0.3, "b2")))
    assert m.statuses_refused["replayed"] == 2
    assert "b" not in m.members()


@pytest.mark.usefixtures("brokers")
def test_members_are_aged_by_their_own_period(idle: MonitorGroupMember) -> None:
    """A member whose period is longer than ours counts for 3 of ITS periods (S8: it was aged by
    ours, so a member with a status every 5 s never counted against a 3 x 0.5 s window)."""
    m, lay = idle, idle.layout
    m._on_status(_status(lay, MemberStatus("slow", (), {}, 1.0, time.time(), "s")))
    m._on_status(_status(lay, MemberStatus("quick", (), {}, 0.2, time.time(), "q")))
    time.sleep(1.6)  # past 3 of our periods (1.5 s) and of quick's (0.6 s); within slow's 3 s
    assert set(m.members()) == {"me", "slow"}


@pytest.mark.usefixtures("brokers")
def test_a_replayed_status_of_a_gone_member_does_not_make_a_lone_member_release() -> None:
    """(Review finding 3, B.) An hour-old status signed with the group's key, replayed every
    quarter period, counted as a live member: the lone member's share halved and it released
    shards to itself over and over. Now refused as stale."""
    lay = _layout("activemq", 4)
    a = _member("activemq", lay, "a")
    replayer = _transport("activemq")
    stop = threading.Event()
    ghost = MemberStatus("ghost", (), {}, 0.5, time.time() - 3600)
    body = _encode_status(lay, ghost, BeatCodec(KEY))

    def replay() -> None:
        while not stop.wait(0.25):
            replayer.publish(status_topic(lay.group), body, timeout=2)

    th = threading.Thread(target=replay, daemon=True)
    try:
        _wait("a to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        th.start()
        _wait("a stale status refused", lambda: a.statuses_refused.get("stale", 0) >= 4)
        time.sleep(2.0)  # 4 periods: rebalancing runs each period after the first 2
        assert "ghost" not in a.members()
        assert a.releases == 0, f"a lone member released {a.releases} shards to itself"
    finally:
        stop.set()
        th.join(5)
        _close(a)
        replayer.close()


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("broker", ["activemq", "rabbitmq"])
def test_the_survivor_does_not_release_shards_to_itself_after_a_member_leaves(broker: str) -> None:
    """(Review finding 3, A.) a and b share 4 shards; b stops. a counted b for 3 more periods
    (its share 2) and released shards to itself, each a takeover. b's stop() now sends a
    leaving status: a drops b at once."""
    lay = _layout(broker, 4)
    a = _member(broker, lay, "a")
    b = _member(broker, lay, "b")
    try:
        _wait(
            "the shards shared 2 and 2",
            lambda: len(a.owned) == 2 and len(b.owned) == 2 and not a.owned & b.owned,
            20,
        )
        b.stop()
        _wait("a to drop b (its leaving status)", lambda: "b" not in a.members(), 1)
        _wait("a to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        released, taken = a.releases, a.takeovers
        time.sleep(4 * 0.5 + 0.5)
        assert a.releases == released, (
            f"a, alone, released {a.releases - released} shards to itself "
            f"({a.takeovers - taken} takeovers) after b left"
        )
    finally:
        _close(a, b)


@pytest.mark.usefixtures("brokers")
def test_group_status_leaves_out_a_member_that_left() -> None:
    lay = _layout("activemq", 4)
    sender = _transport("activemq")
    codec = BeatCodec(KEY)
    out: list[Any] = []
    th = threading.Thread(
        target=lambda: out.append(group_status(sender, lay.group, key=KEY, wait=1.5))
    )
    try:
        th.start()
        time.sleep(0.5)  # its subscription is up
        now = time.time()
        for st in [
            MemberStatus("stays", (0, 1), {"ALIVE": 1}, 0.5, now, "s"),
            MemberStatus("goes", (2, 3), {"ALIVE": 2}, 0.5, now, "g"),
            MemberStatus("goes", (), {}, 0.5, now + 0.01, "g", leaving=True),
        ]:
            sender.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)
        th.join(10)
        assert set(out[0].members) == {"stays"}
    finally:
        sender.close()


@pytest.mark.usefixtures("brokers")
def test_released_shards_coming_straight_back_slow_the_releases_down() -> None:
    """A member counted but not consuming (alive, say, on another broker): each shard the lone
    member releases comes straight back to it. Releases back off (2, 4, 8 ... periods) instead
    of one per period, each a takeover."""
    lay = _layout("activemq", 4)
    a = _member("activemq", lay, "a")
    talker = _transport("activemq")
    stop = threading.Event()

    def talk() -> None:  # a live member in the status topic, with no shard subscription
        codec = BeatCodec(KEY)
        while not stop.wait(0.25):
            st = MemberStatus("absent", (), {}, 0.5, time.time(), "x")
            talker.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)

    th = threading.Thread(target=talk, daemon=True)
    try:
        _wait("a to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        th.start()
        _wait("a first release", lambda: a.releases >= 1)
        t0, r0 = time.monotonic(), a.releases
        time.sleep(5.0)  # 10 periods: one release a period would be 10
        n = a.releases - r0
        assert a.bounced >= 2, f"{a.bounced} releases seen coming back"
        assert n <= 3, f"{n} releases in {time.monotonic() - t0:.1f} s (no back-off)"
    finally:
        stop.set()
        th.join(5)
        _close(a)
        talker.close()


# -- finding 10: statuses of members gone are forgotten; the table is capped ----------------


@pytest.mark.usefixtures("brokers")
def test_statuses_of_members_gone_are_forgotten() -> None:
    """(Review finding 10.) 200 names heard, then silent: all forgotten once aged out (they
    were kept for ever)."""
    lay = _layout("activemq", 2)
    a = _member("activemq", lay, "a")
    sender = _transport("activemq")
    try:
        _wait("a to own its shards (its subscriptions are up)", lambda: len(a.owned) == 2)
        codec = BeatCodec(KEY)
        for i in range(200):
            st = MemberStatus(f"gone{i}", (), {}, 0.5, time.time())
            sender.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)
        _wait("a to hear the 200 statuses", lambda: len(a._members) >= 200)
        _wait("the 200 forgotten", lambda: not a._members, 5)
        assert set(a.members()) == {"a"}
    finally:
        _close(a)
        sender.close()


@pytest.mark.usefixtures("brokers")
def test_the_member_table_is_capped(idle: MonitorGroupMember, monkeypatch: Any) -> None:
    monkeypatch.setattr(groups, "MAX_MEMBERS", 3)
    now = time.time()
    for i in range(5):
        idle._on_status(_status(idle.layout, MemberStatus(f"m{i}", (), {}, 0.5, now, "i")))
    assert len(idle._members) == 3
    assert idle.statuses_refused == {"too_many": 2}
    # One already known is still refreshed.
    idle._on_status(_status(idle.layout, MemberStatus("m0", (2,), {}, 0.5, now + 1, "i")))
    assert idle._members["m0"][1].owned == (2,)


# -- finding 11: two members given one name ------------------------------------------------


@pytest.mark.usefixtures("brokers")
def test_two_members_given_the_same_name_complain(caplog: pytest.LogCaptureFixture) -> None:
    """(Review finding 11.) Each dropped the other's status as its own, silently. Now each
    status of the other incarnation is counted (``same_name``), logged once."""
    lay = _layout("activemq", 4)
    a = _member("activemq", lay, "same")
    b = None
    try:
        _wait("the first to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        with caplog.at_level(logging.WARNING, logger="heartwire.groups"):
            b = _member("activemq", lay, "same")
            _wait(
                "both to count the other's statuses",
                lambda: (
                    a.statuses_refused.get("same_name", 0) >= 3
                    and b is not None
                    and b.statuses_refused.get("same_name", 0) >= 3
                ),
            )
        logged = [r for r in caplog.records if "is named 'same' too" in r.getMessage()]
        assert len(logged) == 2, [r.getMessage() for r in logged]  # once by each
        assert a.refused >= 3 and b.refused >= 3
    finally:
        _close(a, *([b] if b else []))


# -- S5: one failing step does not skip the others; S3: sweeps on the worker only -----------


@pytest.mark.usefixtures("brokers")
def test_a_failing_tick_skips_neither_the_other_shards_nor_the_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every send of shard 0's tick fails: the other shards' ticks still go (the member owns
    them), its status still goes (group_status hears it), each failure counted, logged once in
    the 10 s (a failing tick skipped the rest of the period: status and all)."""
    lay = _layout("activemq", 4)
    a = _member("activemq", lay, "a", start=False)
    real = a.transport.send_to

    def send_to(where: Any, *args: Any, **kw: Any) -> Any:
        if callable(where) and where(a.transport.dialect).endswith(f"{lay.group}.0"):
            raise TimeoutError("shard 0's queue is full (the test's)")
        return real(where, *args, **kw)

    a.transport.send_to = send_to  # type: ignore[method-assign]
    listener = _transport("activemq")
    try:
        with caplog.at_level(logging.ERROR, logger="heartwire.groups"):
            a.start()
            _wait("shards 1-3 owned", lambda: a.owned == frozenset({1, 2, 3}))
            st = group_status(listener, lay.group, key=KEY, wait=1.5)
            _wait("3 tick failures", lambda: a.failures.get("tick", 0) >= 3)
        assert st.members["a"].owned == (1, 2, 3)
        assert 0 not in a.owned
        logged = [r for r in caplog.records if "tick failed" in r.getMessage()]
        assert len(logged) == 1, [r.getMessage() for r in logged]
    finally:
        _close(a)
        listener.close()


@pytest.mark.usefixtures("brokers")
def test_a_connection_loss_is_swept_on_the_worker_not_the_failover_thread() -> None:
    """_lose_all (the transport's observer, on its failover thread) only marks the shards lost;
    the member's worker removes their topics (a removal can wait on a "block" listener queue,
    which must not stall the reconnection)."""
    lay = _layout("activemq", 2)
    a = _member("activemq", lay, "a")
    pub = _transport("activemq")
    removed_on: list[str] = []
    real = a.monitor.remove

    def remove(topic: str) -> bool:
        removed_on.append(threading.current_thread().name)
        return real(topic)

    a.monitor.remove = remove  # type: ignore[method-assign]
    try:
        _wait("a to own the 2 shards", lambda: a.owned == frozenset(range(2)))
        publisher = hw.HeartbeatPublisher(pub, "svc.one", period=0.5, shards=lay)
        publisher.start()
        _wait("svc.one watched", lambda: "svc.one" in a.monitor)
        publisher.stop()
        caller = threading.current_thread().name
        a._lose_all()  # as on_disconnected does
        assert removed_on == [], "swept on the caller's thread"
        _wait("the worker to sweep", lambda: bool(removed_on))
        assert caller not in removed_on
        assert set(removed_on) == {"heartwire-group-a"}
    finally:
        _close(a)
        pub.close()


@pytest.mark.usefixtures("brokers")
def test_a_member_claiming_shards_given_to_us_since_is_not_counted() -> None:
    """A member killed -9 sends no leaving status; its last status still claims the shards
    the broker then gave the survivor. That status predates the survivor's ownership: the
    member is not counted (it was, for 3 periods: releases to itself, each a takeover)."""
    lay = _layout("activemq", 4)
    before = time.time()  # a comes to own its shards after this
    a = _member("activemq", lay, "a")
    sender = _transport("activemq")
    codec = BeatCodec(KEY)
    try:
        _wait("a to own the 4 shards", lambda: a.owned == frozenset(range(4)))
        for st in [
            MemberStatus("killed", (2, 3), {"ALIVE": 5}, 0.5, before - 0.1, "k"),
            MemberStatus("standby", (), {}, 0.5, time.time(), "s"),
        ]:
            sender.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)
        _wait("a to hear both", lambda: {"killed", "standby"} <= set(a._members))
        assert set(a.members()) == {"a", "standby"}
        # A newer status of it (alive after all, and no longer claiming them): counted again.
        st = MemberStatus("killed", (), {}, 0.5, time.time(), "k")
        sender.publish(status_topic(lay.group), _encode_status(lay, st, codec), timeout=2)
        _wait("a to count it again", lambda: "killed" in a.members())
    finally:
        _close(a)
        sender.close()
