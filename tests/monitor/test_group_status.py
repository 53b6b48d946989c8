"""group_status and the status messages it reads (review of issue 18's member, findings 6-9 and
S8): each shard counted from its owner, member names and count keys checked, ``wait`` bounded,
refused statuses counted by reason, the default wait long enough for the periods heard."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.groups import (
    GroupStatus,
    MemberStatus,
    MonitorGroupMember,
    ShardLayout,
    SnapshotError,
    _decode_status,
    _decode_status_counted,
    _encode_status,
    group_status,
    status_topic,
)
from heartwire.transport.stomp import StompTransport
from tests import brokers as B
from tests.brokers import brokers  # noqa: F401  (the session fixture)

KEY = b"group-key"


def _status(
    name: str,
    owned: tuple[int, ...],
    sent: float,
    by_shard: dict[int, dict[str, int]] | None = None,
    counts: dict[str, int] | None = None,
    period: float = 1.0,
) -> MemberStatus:
    if counts is None:
        counts = {}
        for c in (by_shard or {}).values():
            for k, n in c.items():
                counts[k] = counts.get(k, 0) + n
    return MemberStatus(name, owned, counts, period, sent, shard_counts=by_shard)


# -- finding 6: each shard counted once, from its owner --


def test_group_counts_do_not_count_a_handed_over_shard_twice() -> None:
    """Statuses without per-shard counts (members of the version before): the old owner's last
    status (shards 0 and 1, 5 ALIVE) and the new owner's (0..3 now, 10 ALIVE) heard across a
    handover. The old owner owns nothing any more: its counts are left out."""
    old = MemberStatus("old", (0, 1), {"ALIVE": 5}, 1.0, 1000.0)
    new = MemberStatus("new", (0, 1, 2, 3), {"ALIVE": 10}, 1.0, 1001.0)
    st = GroupStatus("g", 4, {"old": old, "new": new})
    assert st.owners == {0: "new", 1: "new", 2: "new", 3: "new"}
    assert st.counts == {"ALIVE": 10}, f"counts {st.counts}: the old owner's topics counted too"
    assert st.shards_of("old") == () and st.counts_of("old") == {}
    assert st.shards_of("new") == (0, 1, 2, 3)


def test_a_shard_handed_over_is_counted_from_its_new_owner_only() -> None:
    """A partial handover: the old owner's last status claims 0 and 1, the newer status of the
    member that took 1 claims 1, 2, 3. Shard 1's 3 topics are counted once (from the new
    owner's per-shard counts), shard 0's from the old owner, which is listed owning 0 only."""
    old = _status("old", (0, 1), 1000.0, {0: {"ALIVE": 2}, 1: {"ALIVE": 3}})
    new = _status(
        "new", (1, 2, 3), 1001.0, {1: {"ALIVE": 3, "FAILED": 0}, 2: {"ALIVE": 4}, 3: {"FAILED": 1}}
    )
    st = GroupStatus("g", 4, {"old": old, "new": new})
    assert st.owners == {0: "old", 1: "new", 2: "new", 3: "new"}
    assert st.shards_of("old") == (0,) and st.counts_of("old") == {"ALIVE": 2}
    assert st.counts_of("new") == {"ALIVE": 7, "FAILED": 1}
    assert st.counts == {"ALIVE": 9, "FAILED": 1}


def test_members_of_both_versions_are_read_together() -> None:
    """A status without per-shard counts (an older member's) still decodes, and is counted
    whole while its sender owns a shard; one with them round-trips."""
    lay = ShardLayout("payments", 4)
    codec = BeatCodec(KEY)
    old = MemberStatus("m-old", (0,), {"ALIVE": 4}, 1.0, 1000.0)
    new = _status("m-new", (1, 2, 3), 1000.5, {1: {"ALIVE": 1}, 2: {}, 3: {"FAILED": 2}})
    assert b"shard_counts" not in _encode_status(lay, old, codec)
    got_old = _decode_status(_encode_status(lay, old, codec), lay, codec)
    got_new = _decode_status(_encode_status(lay, new, codec), lay, codec)
    assert got_old == old and got_old.shard_counts is None
    assert got_new == new
    st = GroupStatus("payments", 4, {"m-old": got_old, "m-new": got_new})
    assert st.counts == {"ALIVE": 5, "FAILED": 2}


@pytest.mark.parametrize(
    "shard_counts",
    [
        {"9": {"ALIVE": 1}},  # not a shard it owns
        {"0": {"ALIVE": 1}},  # in range, not owned
        {"x": {}},
        {"9" * 5000: {}},  # (int() of it would raise ValueError beyond 4300 digits)
        {"1": {"ALIVE": -1}},
        {"1": ["ALIVE"]},
        ["1"],
    ],
)
def test_bad_per_shard_counts_are_refused(shard_counts: object) -> None:
    lay = ShardLayout("payments", 4)
    codec = BeatCodec(KEY)
    body = codec.seal(
        {
            "hwgroup": 1,
            "group": "payments",
            "shards": 4,
            "member": "m1",
            "owned": [1],
            "counts": {},
            "period": 1.0,
            "sent": 1000.0,
            "shard_counts": shard_counts,
        }
    )
    with pytest.raises(SnapshotError) as info:
        _decode_status(body, lay, codec)
    assert info.value.reason == "malformed"


@pytest.mark.usefixtures("brokers")
def test_the_member_sends_per_shard_counts_of_the_shards_it_owns() -> None:
    """A lone member owning the 4 shards: its status's per-shard counts are its topics' states
    by shard, and group_status sums them to the monitor's counts."""
    lay = ShardLayout(f"hws{uuid.uuid4().hex[:8]}", 4)
    t = hw.connect(B.url("activemq") + "?heartbeat=1")
    assert isinstance(t, StompTransport)
    mon = hw.HeartbeatMonitor(None, "svc.>", period=0.5)
    m = MonitorGroupMember(t, mon, lay, member="m1", key=KEY).start()
    try:
        deadline = time.monotonic() + 10
        while m.owned != frozenset(range(4)):
            assert time.monotonic() < deadline, f"m1 owns {sorted(m.owned)} after 10 s"
            time.sleep(0.05)
        topics = [f"svc.t{i}" for i in range(40)]
        for name in topics:
            mon.expect(name, 5.0)
        want: dict[int, dict[str, int]] = {k: {} for k in range(4)}
        for name in topics:
            state = mon.status(name).state
            want[lay.shard_of(name)][state] = want[lay.shard_of(name)].get(state, 0) + 1
        st = group_status(t, lay.group, key=KEY, wait=1.5)
        assert st.members["m1"].owned == (0, 1, 2, 3)
        assert st.members["m1"].shard_counts == want
        assert st.counts == {k: v for k, v in mon.counts().items() if v}
    finally:
        m.stop()
        t.close()


# -- finding 7: member names and count keys --


@pytest.mark.parametrize(
    "name", ["x\n  a: shards 0,1,2,3", "a b", "a\x1b[2J", "é", "", "a" * 129, "a/b", 7]
)
def test_a_status_or_snapshot_with_an_unsafe_member_name_is_refused(name: object) -> None:
    lay = ShardLayout("payments", 4)
    body = _encode_status(lay, MemberStatus(name, (), {}, 1.0, 1000.0), BeatCodec(None))  # type: ignore[arg-type]
    with pytest.raises(SnapshotError, match="'member'") as info:
        _decode_status(body, lay, BeatCodec(None))
    assert info.value.reason == "malformed"


def test_names_of_the_safe_alphabet_are_taken() -> None:
    lay = ShardLayout("payments", 4)
    for name in ["a", "host-1.example.com:7", "m_2", "0" * 128]:
        st = MemberStatus(name, (), {}, 1.0, 1000.0)
        assert _decode_status(_encode_status(lay, st, BeatCodec(None)), lay, BeatCodec(None)) == st


def test_count_keys_other_than_state_names_are_dropped_and_counted() -> None:
    """A newer member's state name does not get its whole status refused; no key other than a
    state name reaches the caller (or a terminal)."""
    lay = ShardLayout("payments", 4)
    codec = BeatCodec(None)
    st = _status(
        "m1",
        (1,),
        1000.0,
        {1: {"ALIVE": 2, "LIMBO": 1}},
        counts={"ALIVE": 2, "ALIVE\x1b[31m": 5, "LIMBO": 1},
    )
    got, shards, dropped = _decode_status_counted(_encode_status(lay, st, codec), lay, codec)
    assert got.counts == {"ALIVE": 2} and got.shard_counts == {1: {"ALIVE": 2}}
    assert shards == 4 and dropped == 3


@pytest.mark.usefixtures("brokers")
def test_the_member_refuses_an_unsafe_name() -> None:
    t = hw.connect(B.url("activemq"))
    assert isinstance(t, StompTransport)
    try:
        mon = hw.HeartbeatMonitor(None, "svc.>")
        for bad in ["a b", "x\ny", "a\x1b[2J", "a" * 129]:
            with pytest.raises(ValueError, match="member"):
                MonitorGroupMember(t, mon, ShardLayout("payments", 4), member=bad)
    finally:
        t.close()


# -- finding 8: wait bounded --


@pytest.mark.parametrize("wait", [1e300, 86400.5, float("inf")])
def test_group_status_bounds_its_wait(wait: float) -> None:
    t = hw.connect()  # no broker needed: the wait is checked before anything is done
    try:
        with pytest.raises(ValueError, match="wait"):
            group_status(t, "g", wait=wait)  # type: ignore[arg-type]
    finally:
        t.close()


# -- a sender of status messages on the real broker --


@pytest.fixture
def sender() -> Iterator[StompTransport]:
    t = hw.connect(B.url("activemq"))
    assert isinstance(t, StompTransport)
    yield t
    t.close()


def _send(
    t: StompTransport, group: str, bodies: Sequence[bytes], after: float, stop: threading.Event
) -> threading.Thread:
    """Publish ``bodies`` to ``group``'s status topic every 0.2 s, starting ``after`` s from now."""

    def run() -> None:
        if stop.wait(after):
            return
        while True:
            for body in bodies:
                t.publish(status_topic(group), body, timeout=2)
            if stop.wait(0.2):
                return

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


# -- finding 9: refused statuses counted by reason --


@pytest.mark.usefixtures("brokers")
def test_refused_statuses_are_counted_by_reason(sender: StompTransport) -> None:
    """Statuses signed with another key (and one malformed) are not members, but they are not
    silence either: ``refused`` says how many and why."""
    lay = ShardLayout(f"hws{uuid.uuid4().hex[:8]}", 4)
    signed = _encode_status(lay, _status("a", (0, 1), time.time()), BeatCodec(b"other-key"))
    bad = BeatCodec(KEY).seal({"hwgroup": 1, "group": lay.group, "shards": 4, "member": "a b"})
    stop = threading.Event()
    th = _send(sender, lay.group, [signed, bad], 0.0, stop)
    try:
        st = group_status(sender, lay.group, key=KEY, wait=1.0)
    finally:
        stop.set()
        th.join(5)
    assert st.members == {}
    assert set(st.refused) == {"bad_signature", "malformed"}, st.refused
    assert st.refused["bad_signature"] >= 2 and st.refused["malformed"] >= 2


@pytest.mark.usefixtures("brokers")
def test_unknown_state_names_are_counted_in_the_group_status(sender: StompTransport) -> None:
    lay = ShardLayout(f"hws{uuid.uuid4().hex[:8]}", 4)
    st_a = _status("a", (0, 1, 2, 3), time.time(), {0: {"ALIVE": 1}}, counts={"ALIVE": 1, "X": 1})
    stop = threading.Event()
    th = _send(sender, lay.group, [_encode_status(lay, st_a, BeatCodec(KEY))], 0.0, stop)
    try:
        st = group_status(sender, lay.group, key=KEY, wait=1.0)
    finally:
        stop.set()
        th.join(5)
    assert set(st.members) == {"a"} and st.members["a"].counts == {"ALIVE": 1}
    assert st.unknown_states >= 1 and st.counts == {"ALIVE": 1} and st.refused == {}


# -- S8: the default wait against members whose period is longer than it --


@pytest.mark.usefixtures("brokers")
def test_the_default_wait_hears_members_with_a_longer_period(sender: StompTransport) -> None:
    """Members with a 4 s period: the first status comes 3 s after the call (past the 2.5 s a
    fixed default listened), the second member's 4.5 s after it. The default keeps listening
    for a first status, then 1.25 periods from the start (5.25 s): both are heard."""
    lay = ShardLayout(f"hws{uuid.uuid4().hex[:8]}", 4)
    codec = BeatCodec(KEY)
    a = _encode_status(lay, _status("a", (0, 1), time.time(), period=4.0), codec)
    b = _encode_status(lay, _status("b", (2, 3), time.time(), period=4.0), codec)
    stop = threading.Event()
    threads = [_send(sender, lay.group, [a], 3.0, stop), _send(sender, lay.group, [b], 4.5, stop)]
    try:
        st = group_status(sender, lay.group, key=KEY)
    finally:
        stop.set()
        for th in threads:
            th.join(5)
    assert set(st.members) == {"a", "b"}, (sorted(st.members), st.waited)
    assert 5.0 <= st.waited <= 6.5, st.waited
    assert st.owners == {0: "a", 1: "a", 2: "b", 3: "b"}


@pytest.mark.usefixtures("brokers")
def test_the_default_wait_ends_at_2_5_s_for_short_periods(sender: StompTransport) -> None:
    lay = ShardLayout(f"hws{uuid.uuid4().hex[:8]}", 4)
    a = _encode_status(lay, _status("a", (0, 1, 2, 3), time.time(), period=0.5), BeatCodec(KEY))
    stop = threading.Event()
    th = _send(sender, lay.group, [a], 0.0, stop)
    try:
        st = group_status(sender, lay.group, key=KEY)
    finally:
        stop.set()
        th.join(5)
    assert set(st.members) == {"a"} and 2.5 <= st.waited < 3.5, st.waited
