"""Silences as signed control messages over the embedded broker, on a manual clock: a signed
silence reaches every monitor with the key; unsigned, forged, stale, replayed, expired, unknown
and malformed ones are refused, counted by reason and reported without the key or signature."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import threading
import time
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import BeatCodec
from heartwire.control import (
    CONTROL_TOPIC,
    ControlError,
    ControlMessage,
    send_silence,
    send_unsilence,
)

KEY = "control-key"


class Seen(hw.SubscriberListener):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.errors: list[hw.ExceptionEvent] = []

    def on_failed(self, event: hw.Failed) -> None:
        self.events.append(("failed", event.topic, event.missed, event.at, event.silenced))

    def on_resumed(self, event: hw.Resumed) -> None:
        self.events.append(("resumed", event.topic, event.at, event.silenced))

    def on_exception(self, event: hw.ExceptionEvent) -> None:
        self.errors.append(event)


def monitor(
    broker: Any, clock: hw.ManualClock, closing: list[Any], **options: Any
) -> tuple[hw.HeartbeatMonitor, Seen]:
    seen = Seen()
    options.setdefault("key", KEY)
    mon = hw.HeartbeatMonitor(
        broker, "svc.>", clock=clock, period=1.0, grace=0.0, listeners=[seen], **options
    )
    closing.append(mon)
    mon.expect("svc.db.main")
    mon.expect("svc.api")
    mon.start()
    return mon, seen


def test_a_signed_silence_reaches_two_monitors_and_marks_their_events(
    closing: list[Any],
) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    (a, seen_a), (b, seen_b) = (monitor(broker, clock, closing) for _ in range(2))
    sent = send_silence(broker, "svc.db.>", duration="30m", key=KEY, reason="db upgrade")
    for mon in (a, b):
        (s,) = mon.silences()
        assert (s.pattern, s.reason) == ("svc.db.>", "db upgrade")
        assert s.wall_end == pytest.approx(sent.until, abs=0.01)
        assert mon.stats()["control"] == {"silence": 1}
        assert mon.stats()["control_refused"] == {}
    clock.advance(1.5)
    for mon, seen in ((a, seen_a), (b, seen_b)):
        assert mon.drain(5.0)
        assert sorted(seen.events) == [
            ("failed", "svc.api", 1, 1.0, False),
            ("failed", "svc.db.main", 1, 1.0, True),
        ]
        assert seen.errors == []
    # The unsilence by the sender's id releases the alert held back, on both.
    send_unsilence(broker, sent.id, key=KEY)
    for mon, seen in ((a, seen_a), (b, seen_b)):
        assert mon.drain(5.0)
        assert mon.silences() == []
        assert seen.events[-1] == ("failed", "svc.db.main", 1, 1.5, False)
        assert mon.stats()["control"] == {"silence": 1, "unsilence": 1}
        assert mon.stats()["released"] == 1


def signed(key: str, **fields: Any) -> bytes:
    """A control message of exactly ``fields``, signed with ``key``."""
    return BeatCodec(key).seal(fields)


def fresh(**fields: Any) -> dict[str, Any]:
    now = time.time()
    base: dict[str, Any] = {
        "hwctl": 2,
        "op": "silence",
        "dest": CONTROL_TOPIC,
        "id": "s1",
        "pattern": "svc.>",
        "until": now + 60,
        "sent": now,
        "nonce": "n" * 32,
    }
    base.update(fields)
    return base


def test_every_bad_message_is_refused_counted_and_reported_without_the_key(
    closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, seen = monitor(broker, clock, closing)
    good = ControlMessage.silence("svc.>", duration=60)
    good_body = good.encode(KEY)
    forged_body = good.encode("not-the-key")
    sig = json.loads(forged_body)["sig"]
    now = time.time()
    bad: list[tuple[str, bytes]] = [
        ("unsigned", BeatCodec(None).seal(fresh())),
        ("bad_signature", forged_body),
        ("bad_signature", good_body.replace(b'"svc.>"', b'"svc.db.>"')),  # tampered
        ("malformed", b"not json"),
        ("malformed", b"\xff\xfe"),
        ("malformed", signed(KEY, **fresh(hwctl=1))),
        ("malformed", signed(KEY, **fresh(hwctl=3))),
        ("malformed", signed(KEY, **fresh(dest="_hw.>"))),
        ("malformed", signed(KEY, **{k: v for k, v in fresh().items() if k != "dest"})),
        ("wrong_destination", signed(KEY, **fresh(dest="_hw.other"))),
        ("malformed", signed(KEY, **fresh(op="mute"))),
        ("malformed", signed(KEY, **fresh(pattern="svc..>"))),
        ("malformed", signed(KEY, **fresh(until="soon"))),
        ("malformed", signed(KEY, **fresh(until=now - 1))),  # before sent
        ("malformed", signed(KEY, **fresh(nonce="short"))),
        ("malformed", signed(KEY, **fresh(id="a b"))),
        ("malformed", signed(KEY, **fresh(reason="x" * 257))),
        ("malformed", signed(KEY, **fresh(reason="\ud800"))),
        ("too_large", b"{" + b" " * 70_000 + b"}"),
        ("stale", signed(KEY, **fresh(sent=now - 3600, until=now + 60, nonce="a" * 32))),
        ("stale", signed(KEY, **fresh(sent=now + 3600, until=now + 7200, nonce="b" * 32))),
        ("expired", signed(KEY, **fresh(sent=now - 10, until=now - 5, id="e", nonce="c" * 32))),
        ("unknown_silence", ControlMessage.unsilence("nobody").encode(KEY)),
    ]
    for _, body in bad:
        broker.publish(CONTROL_TOPIC, body)
    broker.publish(CONTROL_TOPIC, good_body)
    broker.publish(CONTROL_TOPIC, good_body)  # replayed: the same nonce
    again = dataclasses.replace(good, nonce="d" * 32)
    broker.publish(CONTROL_TOPIC, again.encode(KEY))  # replayed: the same silence id
    assert mon.drain(5.0)
    want: dict[str, int] = {}
    for reason, _ in [*bad, ("replayed", b""), ("replayed", b"")]:
        want[reason] = want.get(reason, 0) + 1
    assert mon.stats()["control_refused"] == want
    assert mon.stats()["control"] == {"silence": 1}
    assert [s.pattern for s in mon.silences()] == ["svc.>"]
    assert sorted(e.reason for e in seen.errors) == sorted(
        f"control_{r}" for r in want for _ in range(want[r])
    )
    for event in seen.errors:
        assert isinstance(event.error, ControlError)
        assert event.detail.startswith(f"control message on {CONTROL_TOPIC!r}: ")
        assert KEY not in event.detail and sig not in event.detail
    logged = caplog.text
    assert "refused control message" in logged
    assert KEY not in logged and sig not in logged
    assert mon.stats()["rejected"] == {}  # none of it was taken for a beat


def test_the_age_bound_is_max_beat_age_or_a_new_topics_default(closing: list[Any]) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    tight, _ = monitor(broker, clock, closing, max_beat_age=5.0)
    loose, _ = monitor(broker, clock, closing, max_beat_age=math.inf)
    default, _ = monitor(broker, clock, closing)  # 3 periods + 60 s = 63 s
    now = time.time()
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(sent=now - 10, nonce="a" * 32)))
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(sent=now - 3000, id="old", nonce="b" * 32)))
    assert tight.stats()["control_refused"] == {"stale": 2}
    assert default.stats()["control_refused"] == {"stale": 1}
    assert default.stats()["control"] == {"silence": 1}
    assert loose.stats()["control"] == {"silence": 2}
    assert loose.stats()["control_refused"] == {}


def test_only_a_monitor_with_a_key_subscribes_to_the_control_topic(closing: list[Any]) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    keyless, _ = monitor(broker, clock, closing, key=None)
    off, _ = monitor(broker, clock, closing, control=None)
    other, _ = monitor(broker, clock, closing, control="ops.control")
    assert keyless.control_topic is None and off.control_topic is None
    assert other.control_topic == "ops.control"
    send_silence(broker, "svc.>", duration=60, key=KEY)
    send_silence(broker, "svc.>", duration=60, key=KEY, destination="ops.control")
    assert keyless.silences() == [] and off.silences() == []
    assert keyless.stats()["control"] == {} and keyless.stats()["control_refused"] == {}
    assert [s.pattern for s in other.silences()] == ["svc.>"]
    assert other.stats()["control"] == {"silence": 1}


def test_a_stopped_monitor_takes_no_control_message(closing: list[Any]) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, _ = monitor(broker, clock, closing)
    mon.stop()
    send_silence(broker, "svc.>", duration=60, key=KEY)
    assert mon.silences() == [] and mon.stats()["control"] == {}
    mon.start()  # subscribed again
    send_silence(broker, "svc.>", duration=60, key=KEY)
    assert len(mon.silences()) == 1


def test_a_wide_pattern_never_takes_control_messages_for_beats(closing: list[Any]) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    seen = Seen()
    mon = hw.HeartbeatMonitor(broker, ">", clock=clock, key=KEY, listeners=[seen])
    closing.append(mon)
    mon.start()
    send_silence(broker, "svc.>", duration=60, key=KEY)
    broker.publish(CONTROL_TOPIC, b"not json")
    assert mon.drain(5.0)
    assert mon.stats()["control"] == {"silence": 1}
    assert mon.stats()["control_refused"] == {"malformed": 1}
    assert mon.stats()["rejected"] == {} and CONTROL_TOPIC not in mon
    assert [e.reason for e in seen.errors] == ["control_malformed"]


def test_a_control_topic_inside_the_pattern_is_refused() -> None:
    with pytest.raises(ValueError, match=r"control topic 'svc\.control' matches .*'svc\.>'"):
        hw.HeartbeatMonitor(None, "svc.>", key=KEY, control="svc.control")
    with pytest.raises(ValueError, match=r"control 'svc\.>' contains the wildcard"):
        hw.HeartbeatMonitor(None, "svc.>", key=KEY, control="svc.>")
    # Under _hw. it may match: those topics are never beats.
    assert hw.HeartbeatMonitor(None, ">", key=KEY, control="_hw.ops").control_topic == "_hw.ops"


def test_the_message_format_round_trips_and_is_what_the_docs_say() -> None:
    msg = ControlMessage.silence("svc.db.>", duration="2h", reason="upgrade", id="up-1")
    body = msg.encode(KEY)
    obj = json.loads(body)
    assert sorted(obj) == sorted(
        ["hwctl", "op", "dest", "id", "pattern", "until", "reason", "sent", "nonce", "sig"]
    )
    assert (obj["hwctl"], obj["op"], obj["id"]) == (2, "silence", "up-1")
    assert obj["dest"] == CONTROL_TOPIC
    assert obj["until"] - obj["sent"] == pytest.approx(7200)
    assert ControlMessage.decode(body, BeatCodec(KEY)) == msg
    un = ControlMessage.unsilence("up-1")
    assert sorted(json.loads(un.encode(KEY))) == [
        "dest",
        "hwctl",
        "id",
        "nonce",
        "op",
        "sent",
        "sig",
    ]
    assert ControlMessage.decode(un.encode(KEY), BeatCodec(KEY)) == un
    with pytest.raises(ControlError) as err:
        ControlMessage.decode(body, BeatCodec("other"))
    assert err.value.reason == "bad_signature"
    # A control message is no beat, and a beat is no control message.
    with pytest.raises(hw.beat.DecodeError) as beat_err:
        BeatCodec(KEY).decode(body)
    assert beat_err.value.reason == "bad_field"
    beat = BeatCodec(KEY).encode(hw.beat.Beat("svc.a"))
    with pytest.raises(ControlError, match="malformed: hwctl must be 2"):
        ControlMessage.decode(beat, BeatCodec(KEY))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"duration": "30x"}, ValueError, "duration must be a positive duration"),
        ({"duration": 0}, ValueError, "duration must be a finite number of seconds > 0"),
        ({}, ValueError, "give exactly one of duration and until"),
        ({"duration": 1, "reason": 5}, TypeError, "reason must be a str"),
        ({"duration": 1, "reason": "x" * 257}, ValueError, "reason must be at most 256"),
        ({"duration": 1, "key": ""}, ValueError, "key must not be empty"),
        ({"duration": 1, "key": None}, ValueError, "key must be given"),
        ({"duration": 1, "destination": "a.>"}, ValueError, "destination 'a.>'"),
    ],
)
def test_send_silence_names_the_bad_argument(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    broker = hw.connect()
    kwargs.setdefault("key", KEY)
    with pytest.raises(error, match=message):
        send_silence(broker, "svc.>", **kwargs)
    with pytest.raises(ValueError, match=r"pattern 'svc\.\.>'"):
        send_silence(broker, "svc..>", duration=1, key=KEY)
    broker.close()


def test_refusals_log_throttled(closing: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, _ = monitor(broker, clock, closing)
    caplog.set_level(logging.WARNING, "heartwire.control")
    for _ in range(50):
        broker.publish(CONTROL_TOPIC, b"{}")  # unsigned
    assert mon.stats()["control_refused"] == {"unsigned": 50}
    assert len([r for r in caplog.records if r.name == "heartwire.control"]) == 10


# -- second review of issue 17: until's range, the signed destination, the refusal reasons ----


def test_a_silence_until_beyond_datetime_range_is_refused_not_raised(closing: list[Any]) -> None:
    """until=1e300 (finite): refused as malformed, counted and reported, never raised out of
    the subscription's handler; its id is free again."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, seen = monitor(broker, clock, closing)
    now = time.time()
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=1e300, id="big")))
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=1e12, id="big", nonce="b" * 32)))
    assert mon.drain(5.0)
    assert mon.stats()["control_refused"] == {"malformed": 2}
    assert [e.reason for e in seen.errors] == ["control_malformed"] * 2
    assert "at most 2592000 s (30 days) after sent" in seen.errors[0].detail
    # The id is free: a good silence with it is taken.
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=now + 60, id="big", nonce="c" * 32)))
    assert mon.stats()["control"] == {"silence": 1}


def test_a_far_future_silence_is_malformed_not_expired_and_the_limit_is_30_days(
    closing: list[Any],
) -> None:
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, seen = monitor(broker, clock, closing)
    now = time.time()
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=253402300799.0, id="forever")))
    century = now + 100 * 365 * 86400
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=century, id="c", nonce="b" * 32)))
    month = now + 30 * 86400 - 5
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(until=month, id="m", nonce="c" * 32)))
    assert mon.drain(5.0)
    assert mon.stats()["control_refused"] == {"malformed": 2}, [e.detail for e in seen.errors]
    assert mon.stats()["control"] == {"silence": 1}
    # The sender refuses it too, naming the argument.
    with pytest.raises(ValueError, match="duration must end at most 30 days from now"):
        ControlMessage.silence("svc.>", duration="31d")
    far = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=400)
    with pytest.raises(ValueError, match="until must end at most 30 days from now"):
        send_silence(broker, "svc.>", until=far, key=KEY)


def test_an_expired_silence_is_judged_on_the_monitors_clock(closing: list[Any]) -> None:
    """Expired means until is not after the monitor's now (its clock through wall_offset): a
    manual clock moved an hour on takes a silence of 30 min as expired, not malformed."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, seen = monitor(broker, clock, closing, max_beat_age=math.inf)
    clock.advance(3600.0)
    send_silence(broker, "svc.>", duration="30m", key=KEY)
    assert mon.drain(5.0)
    assert mon.stats()["control_refused"] == {"expired": 1}
    assert "is not after this monitor's now" in seen.errors[0].detail


def test_a_silence_sent_to_one_control_topic_cannot_be_replayed_to_another(
    closing: list[Any],
) -> None:
    """The destination is signed (dest): a silence meant for the monitors on _hw.ctl.staging,
    copied to _hw.ctl.prod, is refused there as wrong_destination."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    prod, prod_seen = monitor(broker, clock, closing, control="_hw.ctl.prod")
    staging, _ = monitor(broker, clock, closing, control="_hw.ctl.staging")
    sent = send_silence(broker, "svc.>", duration=600, key=KEY, destination="_hw.ctl.staging")
    assert sent.dest == "_hw.ctl.staging"
    body = sent.encode(KEY)
    broker.publish("_hw.ctl.prod", body)  # a copy, replayed by whoever can publish there
    assert prod.drain(5.0) and staging.drain(5.0)
    assert prod.silences() == []
    assert prod.stats()["control_refused"] == {"wrong_destination": 1}
    assert "was sent to '_hw.ctl.staging'" in prod_seen.errors[0].detail
    assert [s.pattern for s in staging.silences()] == ["svc.>"]
    # An unsilence is bound to its topic too.
    un = ControlMessage.unsilence(sent.id, destination="_hw.ctl.staging").encode(KEY)
    broker.publish("_hw.ctl.prod", un)
    assert prod.stats()["control_refused"] == {"wrong_destination": 2}
    # A version 1 message (no dest) is refused: it could be replayed anywhere.
    v1 = json.loads(body)
    del v1["sig"], v1["dest"]
    v1.update(hwctl=1, nonce="v" * 32, id="v1")
    broker.publish("_hw.ctl.staging", signed(KEY, **v1))
    assert staging.stats()["control_refused"] == {"malformed": 1}


class Boom(Exception):
    pass


def test_an_error_applying_a_message_is_counted_reported_and_frees_the_id(
    closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any exception while applying (a bug): counted as failed, reported, logged; nothing
    raised into the transport; a silence's id is free again."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, seen = monitor(broker, clock, closing)
    receiver = mon._control
    assert receiver is not None
    real_silence, real_unsilence = receiver._silence, receiver._unsilence

    def boom(*args: Any) -> Any:
        raise Boom("kaput")

    monkeypatch.setattr(receiver, "_silence", boom)
    sent = ControlMessage.silence("svc.>", duration=60, id="s1")
    broker.publish(CONTROL_TOPIC, sent.encode(KEY))
    assert mon.drain(5.0)
    assert mon.stats()["control_refused"] == {"failed": 1}
    assert seen.errors[-1].reason == "control_failed" and "Boom: kaput" in seen.errors[-1].detail
    monkeypatch.setattr(receiver, "_silence", real_silence)
    broker.publish(CONTROL_TOPIC, dataclasses.replace(sent, nonce="x" * 32).encode(KEY))
    assert mon.stats()["control"] == {"silence": 1}  # the id was free
    monkeypatch.setattr(receiver, "_unsilence", boom)
    send_unsilence(broker, "s1", key=KEY)
    assert mon.drain(5.0)
    assert mon.stats()["control_refused"] == {"failed": 2}
    monkeypatch.setattr(receiver, "_unsilence", real_unsilence)
    send_unsilence(broker, "s1", key=KEY)  # the silence is still known: lifted now
    assert mon.drain(5.0)
    assert mon.silences() == []
    assert mon.stats()["control"] == {"silence": 1, "unsilence": 1}


def test_an_active_silence_is_never_forgotten_past_the_memory_bound(
    closing: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_REMEMBERED ids, those of silences over go first: one still in force stays,
    so its unsilence finds it."""
    monkeypatch.setattr(hw.control, "MAX_REMEMBERED", 4)
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    mon, _ = monitor(broker, clock, closing, max_beat_age=math.inf)
    now = time.time()
    broker.publish(CONTROL_TOPIC, signed(KEY, **fresh(id="long", until=now + 3600)))
    receiver = mon._control
    assert receiver is not None
    with receiver._lock:  # ids of silences over, as a long-running monitor would hold
        for i in range(6):
            receiver._ids[f"old{i}"] = (10_000 + i, now - 10)
        receiver._prune(now, math.inf)
    assert "long" in receiver._ids and len(receiver._ids) == 4
    send_unsilence(broker, "long", key=KEY)
    assert mon.drain(5.0)
    assert mon.silences() == []
    assert mon.stats()["control"] == {"silence": 1, "unsilence": 1}


class Holding(Seen):
    """Holds the dispatch thread in its first failure until released (a full feed behind)."""

    lossless = True

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_failed(self, event: hw.Failed) -> None:
        super().on_failed(event)
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(10.0)


def test_an_unsilence_never_waits_for_room_on_the_transports_thread(closing: list[Any]) -> None:
    """Lifting a silence releases alerts, which may wait for room in a full queue: that wait
    is the receiver's worker's, not the thread that reads the control topic (here the
    publisher's own, on the embedded broker: on STOMP, the one reading beats and heart-beats)."""
    clock = hw.ManualClock()
    broker = hw.connect()
    closing.append(broker)
    held = Holding()
    mon = hw.HeartbeatMonitor(
        broker,
        "svc.>",
        clock=clock,
        period=1.0,
        grace=0.0,
        key=KEY,
        listeners=[held],
        listener_queue=None,
        capacity=1,
    )
    closing.append(mon)
    mon.expect("svc.db.main")
    mon.expect("svc.api")
    mon.start()
    sent = send_silence(broker, "svc.db.>", duration="30m", key=KEY)
    clock.advance(1.5)  # two failures: the listener holds one, the feed is full behind it
    assert held.entered.wait(5.0), "the listener got no failure"
    sender = threading.Thread(target=send_unsilence, args=(broker, sent.id), kwargs={"key": KEY})
    sender.start()
    sender.join(5.0)
    stuck = sender.is_alive()
    held.release.set()
    sender.join(10.0)
    assert not stuck, "the unsilence waited for room on the thread that read it"
    assert mon.drain(5.0)
    assert mon.silences() == []
    assert mon.stats()["control"] == {"silence": 1, "unsilence": 1}
    assert ("failed", "svc.db.main", 1, 1.5, False) in held.events  # released at the unsilence
