"""The core's STOMP reader (``FrameReader``) in front of a monitor's ``Intake``: beats recorded
straight from the bytes, every other frame handed back whole and in order, whatever the chunking.
"""

from __future__ import annotations

import json

import pytest

from heartwire import HeartbeatMonitor
from heartwire._core import FrameReader, ManualClock, Routes
from heartwire.beat import Beat, BeatCodec
from heartwire.transport import Message


def message(sub: str, topic: str, body: bytes, *, length: bool = True, extra: str = "") -> bytes:
    head = f"MESSAGE\nsubscription:{sub}\ndestination:/topic/{topic}\nmessage-id:m-{topic}\n{extra}"
    if length:
        head += f"content-length:{len(body)}\n"
    return head.encode() + b"\n" + body + b"\x00"


def beat(topic: str, **fields: object) -> bytes:
    return BeatCodec().encode(Beat(topic, **fields))  # type: ignore[arg-type]


def monitor(pattern: str = "svc.>", **options: object) -> HeartbeatMonitor:
    mon = HeartbeatMonitor(None, pattern, period=1.0, clock=ManualClock(), **options)  # type: ignore[arg-type]
    mon.start()
    return mon


def stream() -> tuple[bytes, bytes]:
    """A connection's bytes: beats for sub-1 among other frames, and the frames stomp.py must
    get (in order)."""
    receipt = b"RECEIPT\nreceipt-id:r-1\n\n\x00"
    other = message("sub-2", "svc.other", beat("svc.other"))
    error = b"ERROR\nmessage:oops\ncontent-length:3\n\na\x00b\x00"
    legacy = message("sub-1", "svc.legacy", b"svc.legacy HEARTBEAT", length=False)
    # A topic with ':' arrives escaped in the destination (decoded as stomp.py would); an
    # escape in another header (ActiveMQ escapes every message-id's ':') does not matter.
    escaped = message("sub-1", "svc.e\\csc", beat("svc.e:sc"))
    amq = message("sub-1", "svc.amq", beat("svc.amq"), extra="x-id:ID\\c1\\c2\n")
    parts = [
        b"CONNECTED\nversion:1.2\n\n\x00\n",
        message("sub-1", "svc.a", beat("svc.a", seq=1, period=2.0)),
        b"\n",  # heart-beat
        receipt,
        b"\r\n",
        message("sub-1", "svc.b", beat("svc.b", seq=1), length=False),
        other,
        legacy,
        escaped,
        amq,
        error,
        message("sub-1", "svc.a", beat("svc.a", seq=2, period=2.0)),
    ]
    wanted = b"CONNECTED\nversion:1.2\n\n\x00" + receipt + other + error
    return b"".join(parts), wanted


def test_beats_are_recorded_and_the_other_frames_come_back_whole_and_in_order() -> None:
    mon = monitor()
    routes = Routes()
    routes.add("sub-1", mon._intake)
    data, wanted = stream()
    out = FrameReader(routes).feed(data)
    assert out == wanted
    assert sorted(mon.detector.handles() and [s.topic for s in mon.statuses()]) == [
        "svc.a",
        "svc.amq",
        "svc.b",
        "svc.e:sc",
        "svc.legacy",
    ]
    assert mon.detector.status("svc.a").period == 2.0  # learned from the beat
    assert mon.stats()["beats"] == 6
    mon.stop()


def test_every_split_of_the_stream_gives_the_same_frames_and_beats() -> None:
    data, wanted = stream()
    for cut in range(1, len(data)):
        mon = monitor()
        routes = Routes()
        routes.add("sub-1", mon._intake)
        reader = FrameReader(routes)
        out = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert out == wanted, f"split at byte {cut}"
        assert mon.stats()["beats"] == 6, f"split at byte {cut}"
        assert reader.pending == 0
        mon.stop()


def test_byte_by_byte() -> None:
    data, wanted = stream()
    mon = monitor()
    routes = Routes()
    routes.add("sub-1", mon._intake)
    reader = FrameReader(routes)
    out = b"".join(reader.feed(data[i : i + 1]) for i in range(len(data)))
    assert out == wanted
    assert mon.stats()["beats"] == 6
    mon.stop()


def test_refusals_are_counted_and_reported_to_on_exception() -> None:
    seen: list[tuple[str, str]] = []

    class Errors:
        def on_exception(self, event: object) -> None:
            seen.append((event.reason, event.detail))  # type: ignore[attr-defined]

    from heartwire.listeners import SubscriberListener

    class L(Errors, SubscriberListener):
        pass

    mon = monitor(key=b"k", listeners=[L()], listener_queue=None)
    routes = Routes()
    routes.add("sub-1", mon._intake)
    forged = BeatCodec(key=b"other").encode(Beat("svc.a", seq=1))
    unsigned = beat("svc.b")
    mismatch = BeatCodec(key=b"k").encode(Beat("svc.c", seq=1))
    data = (
        message("sub-1", "svc.a", forged)
        + message("sub-1", "svc.b", unsigned)
        + message("sub-1", "svc.x", mismatch)
        + message("sub-1", "svc.d", b"\xff\xfe")
    )
    assert FrameReader(routes).feed(data) == b""
    assert mon.stats()["rejected"] == {
        "bad_signature": 1,
        "unsigned": 1,
        "topic_mismatch": 1,
        "not_utf8": 1,
    }
    assert len(mon) == 0
    mon.drain()
    assert [r for r, _ in seen] == ["bad_signature", "unsigned", "topic_mismatch", "not_utf8"]
    assert "svc.x" in seen[2][1]
    mon.stop()


def test_a_body_the_native_decoder_defers_goes_the_python_way() -> None:
    mon = monitor()
    routes = Routes()
    routes.add("sub-1", mon._intake)
    odd = json.dumps({"topic": "svc.a", "v": 1, "payload": {"b": 1, "a": [1.5e300]}}, indent=2)
    frame = message("sub-1", "svc.a", odd.encode())
    out = FrameReader(routes).feed(frame)
    # Either decided natively (recorded) or handed back whole for stomp.py: never lost.
    assert out in (b"", frame)
    if out:
        mon.handle_message(type("M", (), {"body": odd.encode(), "destination": "svc.a"})())  # type: ignore[arg-type]
    assert "svc.a" in mon
    mon.stop()


def test_unrouted_subscriptions_pings_and_foreign_topics_pass_through() -> None:
    mon = monitor("svc.>")
    routes = Routes()
    routes.add("sub-1", mon._intake)
    frames = [
        message("sub-9", "svc.a", beat("svc.a")),  # not routed
        message("sub-1", "_hw.keepalive.x", b"id"),  # a ping under a wide wildcard
        message("sub-1", "svc", beat("svc")),  # RabbitMQ's '#' is wider than '>'
    ]
    data = b"".join(frames)
    assert FrameReader(routes).feed(data) == data
    assert len(mon) == 0
    mon.stop()


def test_heartwires_own_topics_are_never_beats_under_a_wide_pattern() -> None:
    # A control message (or anything under _hw.) reaching a '>' subscription: handed on by the
    # native reader, skipped by the monitor's Python path; counted nowhere as a beat.
    mon = monitor(">")
    routes = Routes()
    routes.add("sub-1", mon._intake)
    frames = [
        message("sub-1", "_hw.control", beat("_hw.control")),
        message("sub-1", "_hw.x.y", b"{}"),
    ]
    data = b"".join(frames)
    assert FrameReader(routes).feed(data) == data
    for topic in ("_hw.control", "_hw.x.y"):
        mon.handle_message(Message(topic, beat(topic)))
    assert len(mon) == 0 and mon.stats()["rejected"] == {}
    mon.stop()


@pytest.mark.parametrize(
    "junk", [b"\x00", b"GARBAGE\x00", b"MESSAGE\n\x00", b"MESSAGE\nsubscription:sub-1\n\n\x00"]
)
def test_hostile_frames_never_crash_and_are_handed_on(junk: bytes) -> None:
    mon = monitor()
    routes = Routes()
    routes.add("sub-1", mon._intake)
    reader = FrameReader(routes)
    out = reader.feed(junk + message("sub-1", "svc.a", beat("svc.a")))
    assert "svc.a" in mon
    assert reader.pending == 0
    assert b"svc.a" not in out
    mon.stop()
