"""Review 18 findings 4 and 5: ``decode_snapshot`` promises a :class:`SnapshotError` "and
nothing else for any bytes", a refusal for a record a new owner cannot use, and an argument
error for a shard outside the layout. Each case failed before its fix."""

from __future__ import annotations

import array
import json

import pytest

from heartwire import _core
from heartwire.groups import ShardLayout, SnapshotError, decode_snapshot

LAYOUT = ShardLayout("g", 4)
TOPIC = next(f"svc.{i}" for i in range(100) if LAYOUT.shard_of(f"svc.{i}") == 0)


def _body(**fields: object) -> bytes:
    obj: dict[str, object] = {
        "hwshard": 1,
        "group": "g",
        "shards": 4,
        "shard": 0,
        "member": "m",
        "seq": 1,
        "sent": 1764000000.0,
        "topics": [],
    }
    obj.update(fields)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "body",
    [
        _body(sent=10**400),
        _body(topics=[[TOPIC, 10**400, 1, None, None]]),
        _body(topics=[[TOPIC, None, 0, None, 10**400]]),
    ],
    ids=["sent", "failed_since", "period"],
)
def test_an_integer_too_large_for_a_float_is_refused_not_an_overflow_error(body: bytes) -> None:
    # Failed before: OverflowError('int too large to convert to float') from math.isfinite
    # in groups._finite escaped decode_snapshot (unsigned group: anyone can send it).
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(body, LAYOUT, 0)
    assert info.value.reason == "malformed"


@pytest.mark.parametrize("period", [1e-300, 1e300])
def test_a_topic_period_the_core_cannot_watch_is_refused(period: float) -> None:
    # Failed before: accepted; a new owner adopting the record then fails on the detector's
    # period range (MIN_BEAT_PERIOD..MAX_BEAT_PERIOD) instead of the snapshot being refused.
    assert not _core.MIN_BEAT_PERIOD <= period <= _core.MAX_BEAT_PERIOD
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(_body(topics=[[TOPIC, None, 0, None, period]]), LAYOUT, 0)
    assert info.value.reason == "malformed"


def test_the_size_limit_counts_bytes_not_memoryview_items() -> None:
    # Failed before: len(memoryview) counts items (8 bytes each here), so a body of 800 bytes
    # passed max_size=200 (memoryview.nbytes is the size).
    body = memoryview(array.array("Q", [0x2020202020202020] * 100))
    assert body.nbytes == 800 and len(body) == 100
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(body, LAYOUT, 0, max_size=200)
    assert info.value.reason == "too_large"


def test_a_topic_listed_twice_is_refused() -> None:
    # Failed before: two rows for one topic (one FAILED, one not) decoded; which one the new
    # owner adopts depends on its loop order.
    rows = [[TOPIC, 1763999990.0, 2, None, 1.0], [TOPIC, None, 0, None, 1.0]]
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(_body(topics=rows), LAYOUT, 0)
    assert info.value.reason == "malformed"


def test_a_reserved_topic_in_a_snapshot_is_refused() -> None:
    # Failed before: a row for a topic under "_hw." (heartwire's own, never a beat) decoded,
    # and Detector.add takes such a name: a new owner adopting it would watch (and fail) it.
    reserved = next(f"_hw.x{i}" for i in range(100) if LAYOUT.shard_of(f"_hw.x{i}") == 0)
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(_body(topics=[[reserved, None, 0, None, None]]), LAYOUT, 0)
    assert info.value.reason == "malformed"


def test_a_shard_outside_the_layout_is_an_argument_error() -> None:
    # Failed before: decode_snapshot(..., shard=9) of a 4-shard layout returned a snapshot of
    # shard 9 (encode_snapshot and snapshot_of check the range through layout.queue).
    with pytest.raises(ValueError, match="shard"):
        decode_snapshot(_body(shard=9), LAYOUT, 9)
