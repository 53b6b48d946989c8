"""Fuzzing in the suite: 10 000 random and mutated frames into a monitor, hypothesis over the
fuzz targets (decoder, URLs, frames), and the findings the atheris harness (scripts/fuzz) made."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heartwire.beat import DECODE_REASONS
from heartwire.monitor import MAX_BEAT_PERIOD, MIN_BEAT_PERIOD, HeartbeatMonitor
from heartwire.transport import Message
from heartwire.transport.urls import parse_url, redact
from tests.fuzz import targets
from tests.fuzz.targets import MAX_TOPICS, PASSWORD, FrameRig, mutated_frames

# What a monitor may count a frame as, besides a recorded beat.
MONITOR_REASONS = DECODE_REASONS | {"pattern_mismatch", "too_many_topics", "bad_period"}


def test_10000_random_and_mutated_frames_each_recorded_or_rejected_with_a_counted_reason() -> None:
    rig = FrameRig()
    try:
        for message in mutated_frames(random.Random(8), 10_000):
            rig.feed(message)  # asserts: no exception, exactly one beat or one rejection
        stats = rig.mon.stats()
        rejected = stats["rejected"]
        assert rig.frames == 10_000
        assert stats["beats"] + sum(rejected.values()) == 10_000
        assert set(rejected) <= MONITOR_REASONS, set(rejected) - MONITOR_REASONS
        # the mix really exercised the decoder and the topic cap
        for reason in ("bad_json", "not_utf8", "bad_field", "topic_mismatch", "too_many_topics"):
            assert rejected.get(reason, 0) > 0, (reason, rejected)
        assert stats["beats"] > 100
        assert len(rig.mon) == MAX_TOPICS  # full, and not one topic more
        assert rig.mon.metrics()["rejected_total"] == sum(rejected.values())
        # the expected topic is still watched and healthy: a beat for it is recorded
        rig.mon.handle_message(Message("svc.real", b'{"v":1,"topic":"svc.real","seq":1}'))
        assert rig.mon.status("svc.real").last_seen is not None
    finally:
        rig.close()


def test_a_signed_monitor_rejects_every_unsigned_or_tampered_frame() -> None:
    rig = FrameRig(key=b"other-key")
    try:
        for message in mutated_frames(random.Random(9), 2_000):
            rig.feed(message)
        stats = rig.mon.stats()
        assert stats["beats"] == 0  # nothing signed with this key
        assert len(rig.mon) == 1  # only the expected topic
        assert {"unsigned", "bad_signature"} <= set(stats["rejected"])
    finally:
        rig.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_decode_target_holds_for_any_bytes(data: bytes) -> None:
    targets.decode(data)


_url_text = st.text(
    alphabet=st.sampled_from(list("stomp:/@?&=,()[]failover.%-_ 0123456789abcdefhuvx:P")),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(_url_text)
def test_url_target_holds_for_any_text(text: str) -> None:
    targets.url(text.encode())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=300), max_size=30))
def test_any_frame_sequence_is_counted_and_bounded(frames: list[bytes]) -> None:
    rig = FrameRig()
    try:
        for data in frames:
            rig.feed(targets.message_from(data))
    finally:
        rig.close()


@pytest.mark.parametrize(
    "url",
    [
        f"failover:(://u:{PASSWORD}@b:61628)?reconnect_interval=0.5",  # found by scripts/fuzz
        f"u:{PASSWORD}@host:61613",
        f"failover:(stomp://a:1,u:{PASSWORD}@b:2)",
        f"stomp://u:{PASSWORD}@bad host:1",
        f"failover:(stomp://a:1,v:{PASSWORD}@stomp://[::1]:61614)",  # found by scripts/fuzz
    ],
)
def test_a_malformed_url_never_repeats_its_password(url: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_url(url)
    assert PASSWORD not in str(info.value)
    assert PASSWORD not in redact(url)


@pytest.mark.parametrize("period", [1e-300, 1e-10, MIN_BEAT_PERIOD / 2, MAX_BEAT_PERIOD * 2])
def test_a_beat_with_a_period_the_core_cannot_time_is_refused_and_counted(period: float) -> None:
    # Found by scripts/fuzz: period 1e-300 passed the decoder and made handle_message raise.
    mon = HeartbeatMonitor(None, "svc.>")
    mon.start()
    try:
        body = f'{{"v":1,"topic":"svc.a","period":{period!r}}}'.encode()
        mon.handle_message(Message("svc.a", body))
        mon.expect("svc.b", period=1.0)
        mon.handle_message(Message("svc.b", body.replace(b"svc.a", b"svc.b")))
        assert "svc.a" not in mon
        assert mon.status("svc.b").period == 1.0
        assert mon.stats()["rejected"] == {"bad_period": 2}
    finally:
        mon.stop()
