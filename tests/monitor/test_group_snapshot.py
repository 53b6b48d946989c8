"""A shard's state snapshot (heartwire.groups): what the member taking a shard over carries on
from. Round trips (signed and not), every refusal by reason, forward-compatible fields, and any
bytes giving a SnapshotError and nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heartwire.groups import (
    SNAPSHOT_REASONS,
    ShardLayout,
    ShardSnapshot,
    SnapshotError,
    TopicRecord,
    decode_snapshot,
    encode_snapshot,
    snapshot_of,
)

LAYOUT = ShardLayout("payments", 4)
KEY = b"group-key"
SENT = 1_764_000_000.25  # the snapshots' send time; decoded as if read a second later
NOW = SENT + 1.0


def _in_shard(shard: int, n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        if LAYOUT.shard_of(f"svc.{i}") == shard:
            out.append(f"svc.{i}")
        i += 1
    return out


SHARD = 2
A, B, C = _in_shard(SHARD, 3)
OTHER = next(f"svc.{i}" for i in range(100) if LAYOUT.shard_of(f"svc.{i}") != SHARD)


def _snapshot(**changes: Any) -> ShardSnapshot:
    fields: dict[str, Any] = {
        "layout": LAYOUT,
        "shard": SHARD,
        "member": "member-1",
        "seq": 7,
        "sent": SENT,
        "topics": (
            TopicRecord(A),
            TopicRecord(B, failed_since=1_763_999_990.5, missed=3, period=2.0),
            TopicRecord(C, failed_since=1_763_999_000.0, missed=1, reason="db unreachable"),
        ),
    }
    fields.update(changes)
    return ShardSnapshot(**fields)


@pytest.mark.parametrize("key", [None, KEY])
def test_round_trip(key: bytes | None) -> None:
    snap = _snapshot()
    body = encode_snapshot(snap, key)
    assert (b'"sig":' in body) is (key is not None)
    assert decode_snapshot(body, LAYOUT, SHARD, key, now=NOW) == snap
    assert [t.topic for t in snap.failed] == [B, C]


def test_the_wire_form_is_compact_rows() -> None:
    obj = json.loads(encode_snapshot(_snapshot(topics=(TopicRecord(A),))))
    assert obj == {
        "hwshard": 1,
        "group": "payments",
        "shards": 4,
        "shard": SHARD,
        "member": "member-1",
        "seq": 7,
        "sent": SENT,
        "topics": [[A, None, 0, None, None]],
    }


def test_newer_fields_are_ignored_and_signed() -> None:
    from heartwire.beat import BeatCodec

    obj = json.loads(encode_snapshot(_snapshot(topics=(TopicRecord(A),))))
    obj["marks"] = {"x": 1}  # a field a later version adds
    obj["topics"][0] += [None, ["later"]]  # no marks (the 6th element), a later row element
    body = BeatCodec(KEY).seal(obj)
    snap = decode_snapshot(body, LAYOUT, SHARD, KEY, now=NOW)
    assert snap.topics == (TopicRecord(A),)


def _tampered(edit: Any, key: bytes | None = None) -> bytes:
    from heartwire.beat import BeatCodec

    obj = json.loads(encode_snapshot(_snapshot()))
    edit(obj)
    return BeatCodec(key).seal(obj)


@pytest.mark.parametrize(
    ("body", "key", "reason", "detail"),
    [
        (b"x" * 101, None, "too_large", "101 bytes, more than 100"),
        (b"\xff{}", None, "not_utf8", ""),
        (b"[1,2]", None, "bad_json", "not an object"),
        (encode_snapshot(_snapshot()), KEY, "unsigned", "no 'sig'"),
        (
            encode_snapshot(_snapshot(), KEY).replace(b"member-1", b"member-2"),
            KEY,
            "bad_signature",
            "does not match",
        ),
        (_tampered(lambda o: o.update(hwshard=2)), None, "malformed", "'hwshard' must be 1"),
        (_tampered(lambda o: o.update(hwshard=True)), None, "malformed", "'hwshard'"),
        (_tampered(lambda o: o.update(group="other")), None, "other_group", "'other'"),
        (_tampered(lambda o: o.update(shards=8)), None, "other_group", "with 8 shards"),
        (_tampered(lambda o: o.update(shard=1)), None, "other_group", "shard 1, not 2"),
        (_tampered(lambda o: o.update(member="")), None, "malformed", "'member'"),
        (_tampered(lambda o: o.update(seq=-1)), None, "malformed", "'seq'"),
        (_tampered(lambda o: o.update(sent="now")), None, "malformed", "'sent'"),
        (_tampered(lambda o: o.update(topics={})), None, "malformed", "'topics' must be a list"),
        (_tampered(lambda o: o["topics"].append([A])), None, "malformed", "topics[3] must be"),
        (
            _tampered(lambda o: o["topics"][0].__setitem__(0, OTHER)),
            None,
            "malformed",
            f"'{OTHER}' is in shard",
        ),
        (
            _tampered(lambda o: o["topics"][0].__setitem__(0, "svc.*")),
            None,
            "malformed",
            "topics[0]: topic 'svc.*'",
        ),
        (
            _tampered(lambda o: o["topics"][1].__setitem__(1, "yesterday")),
            None,
            "malformed",
            "topics[1] failed_since",
        ),
        (
            _tampered(lambda o: o["topics"][1].__setitem__(2, True)),
            None,
            "malformed",
            "topics[1] missed",
        ),
        (
            _tampered(lambda o: o["topics"][1].__setitem__(2, 2**32)),
            None,
            "malformed",
            "topics[1] missed",
        ),
        (
            _tampered(lambda o: o["topics"][2].__setitem__(3, "")),
            None,
            "malformed",
            "topics[2]: the reason",
        ),
        (
            _tampered(lambda o: o["topics"][2].__setitem__(3, "r" * 257)),
            None,
            "malformed",
            "longer than 256",
        ),
        (
            _tampered(lambda o: o["topics"][1].__setitem__(4, 0)),
            None,
            "malformed",
            "topics[1] period must be between 0.001 and 1e+09 seconds, got 0.0",
        ),
    ],
)
def test_refusals(body: bytes, key: bytes | None, reason: str, detail: str) -> None:
    assert reason in SNAPSHOT_REASONS
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(
            body, LAYOUT, SHARD, key, max_size=100 if reason == "too_large" else 10**6, now=NOW
        )
    assert info.value.reason == reason
    assert detail in info.value.detail, info.value.detail
    assert KEY.decode() not in str(info.value)


@pytest.mark.parametrize(
    ("changes", "error", "text"),
    [
        ({"topics": (TopicRecord(OTHER),)}, SnapshotError, "is in shard"),
        ({"topics": (TopicRecord(A, failed_since=float("nan")),)}, SnapshotError, "finite"),
        ({"topics": (TopicRecord(A, missed=-1),)}, SnapshotError, "missed"),
        ({"shard": 4}, ValueError, r"shard must be in \[0, 4\), got 4"),
        ({"member": "m" * 129}, SnapshotError, "member must be 1 to 128 ASCII letters"),
        ({"sent": float("inf")}, SnapshotError, "sent must be a finite number"),
    ],
)
def test_encode_refuses_what_decode_would(changes: dict[str, Any], error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        encode_snapshot(_snapshot(**changes))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_snapshot_error_or_a_snapshot(body: bytes) -> None:
    try:
        decode_snapshot(body, LAYOUT, SHARD)
    except SnapshotError as exc:
        assert exc.reason in SNAPSHOT_REASONS


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=30,
    )
)
def test_any_json_gives_a_snapshot_error_or_a_snapshot(value: Any) -> None:
    obj = json.loads(encode_snapshot(_snapshot()))
    obj["topics"] = [value] if not isinstance(value, list) else value
    try:
        body = json.dumps(obj).encode()
    except ValueError:
        return
    try:
        decode_snapshot(body, LAYOUT, SHARD)
    except SnapshotError as exc:
        assert exc.reason in SNAPSHOT_REASONS


def test_snapshot_of_a_monitor_lists_its_shard_with_failed_outages_in_wall_time() -> None:
    from tests.monitor.test_monitor_semantics import make_rig

    for rig in make_rig():
        rig.mon.start()
        rig.send(A, period=1.0)
        rig.send(B, period=1.0)
        rig.send(OTHER, period=1.0)
        rig.clock.advance(0.9)
        rig.send(A, period=1.0)
        rig.send(OTHER, period=1.0)
        rig.clock.advance(0.9)  # 1.8: B missed its deadline at 1.0 (grace 0)
        rig.send(A, period=1.0)
        rig.mon.pause(OTHER)  # another shard anyway
        rig.mon.expect(C, period=2.0)  # PENDING
        rig.mon.drain(5.0)
        snap = snapshot_of(rig.mon, LAYOUT, SHARD, member="m1", seq=4, sent=99.0)
        assert (snap.member, snap.seq, snap.sent, snap.shard) == ("m1", 4, 99.0, SHARD)
        by_topic = {t.topic: t for t in snap.topics}
        assert sorted(by_topic) == sorted([A, B, C])
        assert by_topic[A] == TopicRecord(A, None, 0, None, 1.0)
        assert by_topic[C] == TopicRecord(C, None, 0, None, 2.0)
        since = rig.mon.status(B).failed_since
        assert since is not None and round(since, 3) == 1.0
        assert by_topic[B] == TopicRecord(B, rig.mon.wall_time(since), 1, None, 1.0)
        assert snap.failed == (by_topic[B],)
        assert decode_snapshot(encode_snapshot(snap), LAYOUT, SHARD, max_age=None) == snap
        rig.mon.pause(A)  # paused by name: in the snapshot, marked paused
        again = {t.topic: t for t in snapshot_of(rig.mon, LAYOUT, SHARD, member="m1", seq=5).topics}
        assert again[A] == TopicRecord(A, None, 0, None, 1.0, paused=True)
        assert not again[B].paused


# -- marks: what the owner's listeners were told (HeartbeatMonitor.adopt carries them on) ----


def test_marks_travel_as_a_sixth_row_element_only_when_not_plain() -> None:
    quiet = TopicRecord(B, 1_763_999_990.5, 3, None, 1.0, False, True, A, True)
    snap = _snapshot(topics=(TopicRecord(A), quiet))
    obj = json.loads(encode_snapshot(snap))
    assert obj["topics"] == [
        [A, None, 0, None, None],
        [B, 1_763_999_990.5, 3, None, 1.0, [False, True, A, True]],
    ]
    assert decode_snapshot(encode_snapshot(snap, KEY), LAYOUT, SHARD, KEY, now=NOW) == snap
    assert TopicRecord(A).plain_marks and not quiet.plain_marks


@pytest.mark.parametrize(
    ("marks", "detail"),
    [
        (
            [True, False, None],
            "topics[0] marks must be [alerted, silenced, suppressed_by, flapping]",
        ),
        ([1, False, None, False], "topics[0] marks must be"),
        ({"alerted": True}, "topics[0] marks must be"),
        ([False, False, "db.>", False], "topics[0] suppressed_by must be a topic name or null"),
        ([False, False, 7, False], "topics[0] suppressed_by must be a topic name or null"),
    ],
)
def test_malformed_marks_are_refused_naming_the_row(marks: Any, detail: str) -> None:
    body = _tampered(lambda o: o["topics"][0].append(marks))
    with pytest.raises(SnapshotError) as err:
        decode_snapshot(body, LAYOUT, SHARD, now=NOW)
    assert err.value.reason == "malformed"
    assert err.value.detail.startswith(detail)


def test_snapshot_of_carries_the_marks_of_a_silenced_outage() -> None:
    from tests.monitor.test_monitor_semantics import make_rig

    for rig in make_rig():
        rig.mon.start()
        rig.mon.silence(B, duration=60)
        rig.mon.expect(A, period=1.0)
        rig.mon.expect(B, period=1.0)
        rig.clock.advance(1.001)  # both FAILED: A alerted, B only silenced
        rig.mon.drain(5.0)
        by_topic = {
            t.topic: t for t in snapshot_of(rig.mon, LAYOUT, SHARD, member="m1", seq=1).topics
        }
        assert by_topic[A].plain_marks
        b = by_topic[B]
        assert (b.alerted, b.silenced, b.suppressed_by, b.flapping, b.missed) == (
            False,
            True,
            None,
            False,
            1,
        )


@pytest.mark.parametrize(
    ("now", "max_age", "ok"),
    [
        (SENT + 600.0, 600.0, True),  # as old as allowed
        (SENT + 600.5, 600.0, False),  # older
        (SENT - 600.5, 600.0, False),  # further ahead of the reader's clock
        (SENT + 10.0, 5.0, False),
        (SENT + 365 * 86400.0, None, True),  # no bound
        (SENT + 365 * 86400.0, float("inf"), True),
    ],
)
def test_a_snapshot_older_than_max_age_is_stale(
    now: float, max_age: float | None, ok: bool
) -> None:
    body = encode_snapshot(_snapshot(), KEY)
    if ok:
        assert decode_snapshot(body, LAYOUT, SHARD, KEY, max_age=max_age, now=now) == _snapshot()
        return
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(body, LAYOUT, SHARD, KEY, max_age=max_age, now=now)
    assert info.value.reason == "stale"
    assert "member-1" in info.value.detail and "seq 7" in info.value.detail


def test_the_default_max_age_is_the_default_ttl() -> None:
    from heartwire.groups import DEFAULT_SNAPSHOT_TTL

    body = encode_snapshot(_snapshot())
    decode_snapshot(body, LAYOUT, SHARD, now=SENT + DEFAULT_SNAPSHOT_TTL)
    with pytest.raises(SnapshotError, match="stale"):
        decode_snapshot(body, LAYOUT, SHARD, now=SENT + DEFAULT_SNAPSHOT_TTL + 1)
    with pytest.raises(SnapshotError, match="stale"):
        decode_snapshot(body, LAYOUT, SHARD)  # the wall clock now: a year and more later


def test_a_malformed_snapshot_is_malformed_before_it_is_stale() -> None:
    body = _tampered(lambda o: o.update(member=""))
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(body, LAYOUT, SHARD, now=SENT + 10**6)
    assert info.value.reason == "malformed"


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"shard": -1}, ValueError, r"shard must be in \[0, 4\), got -1"),
        ({"shard": True}, TypeError, "shard must be an int, got bool"),
        ({"layout": "payments"}, TypeError, "layout must be a ShardLayout, got str"),
        ({"max_size": 0}, ValueError, "max_size must be an int >= 1, got 0"),
        ({"max_size": -1}, ValueError, "max_size must be an int >= 1, got -1"),
        ({"max_age": 0}, ValueError, "max_age must be"),
        ({"max_age": "1"}, TypeError, "max_age must be a number of seconds or None"),
    ],
)
def test_decode_refuses_bad_arguments(kwargs: dict[str, Any], error: type, text: str) -> None:
    args: dict[str, Any] = {"layout": LAYOUT, "shard": SHARD, **kwargs}
    with pytest.raises(error, match=text):
        decode_snapshot(encode_snapshot(_snapshot()), args.pop("layout"), args.pop("shard"), **args)


def test_encode_refuses_a_topic_listed_twice() -> None:
    with pytest.raises(SnapshotError, match=r"topics\[1\]: .* is listed twice"):
        encode_snapshot(_snapshot(topics=(TopicRecord(A), TopicRecord(A, failed_since=SENT))))
