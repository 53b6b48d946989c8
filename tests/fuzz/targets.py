"""Fuzz targets: each takes raw bytes and raises ``AssertionError`` (a finding) only when the
code under test breaks its contract; every other outcome is an accepted or a counted rejection.

- :func:`decode`: :meth:`BeatCodec.decode` (JSON, legacy text, signed) raises only
  ``DecodeError`` with a reason from ``DECODE_REASONS``; a beat it accepts re-encodes to bytes
  that decode to the same beat.
- :func:`url`: :func:`parse_url` raises only ``ValueError``/``TypeError``, and never repeats a
  password in its message.
- :func:`frame`: a STOMP-ish frame (destination header through each broker dialect, hostile
  headers, body) into :meth:`HeartbeatMonitor.handle_message`: never raises, each frame is
  either one recorded beat or one counted rejection, and the topics stay under ``max_topics``.

:func:`mutated_frames` makes frames for the suite (random and mutated valid beats).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import heartwire as hw
from heartwire.beat import DECODE_REASONS, Beat, BeatCodec, DecodeError
from heartwire.monitor import HeartbeatMonitor
from heartwire.transport import Message
from heartwire.transport.dialect import ACTIVEMQ, RABBITMQ
from heartwire.transport.patterns import validate_topic
from heartwire.transport.urls import parse_url

KEY = b"fuzz-key"
PASSWORD = "Pw-8f3kq"
MARK = "Zq9-marker"
MAX_TOPICS = 64
PATTERN = "svc.>"

_PLAIN = BeatCodec()
_SIGNED = BeatCodec(key=KEY)

SEEDS: list[bytes] = [
    b'{"v":1,"topic":"svc.a"}',
    b'{"v":1,"topic":"svc.a","seq":7,"boot":"b00t","sent":1718000000.25,"period":1.0}',
    b'{"v":1,"topic":"svc.b.c","seq":0,"period":0.5,"payload":{"load":[0.3,{"x":null}]}}',
    b"svc.a HEARTBEAT",
    b"  svc.legacy-1:x HEARTBEAT\n",
    _SIGNED.encode(Beat("svc.a", seq=3, period=1.0)),
    _SIGNED.encode(Beat("svc.s", payload={"k": "v"})),
    b'{"v":1,"topic":"svc.a","seq":18446744073709551615}',
    b'{"v":1,"topic":"svc.a","period":1e-300}',
    b'{"v":1,"topic":"svc.a","sent":-1e308}',
]

URL_SEEDS: list[str] = [
    "stomp://localhost:61613",
    f"stomp://user:{PASSWORD}@host:61613?heartbeat=4&connect_timeout=2",
    "stomp://[::1]:61614",
    f"failover:(stomp://a:61613,stomp://u:{PASSWORD}@b:61614)?reconnect_interval=0.5",
    "failover://(stomp://a,stomp://b)?dialect=rabbitmq&vhost=/x",
]


def decode(data: bytes) -> None:
    for codec in (_PLAIN, _SIGNED):
        for destination in (None, "svc.a"):
            try:
                beat = codec.decode(data, destination)
            except DecodeError as exc:
                assert exc.reason in DECODE_REASONS, exc.reason
                assert len(str(exc)) <= 1000, f"{len(str(exc))}-character error message"
                continue
            validate_topic(beat.topic)
            again = codec.decode(codec.encode(beat), destination)
            assert again.topic == beat.topic and again.seq == beat.seq, (beat, again)
            assert again.period == beat.period and again.sent_at == beat.sent_at, (beat, again)


def url(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    # MARK is put in as a password here only (the seeds' PASSWORD may be mutated into a host).
    for candidate in (
        text,
        f"stomp://u:{MARK}@{text}",
        f"failover:(stomp://a:1,v:{MARK}@{text})",
        f"failover:({text})?{text}",
    ):
        try:
            parse_url(candidate)
        except (ValueError, TypeError) as exc:
            assert MARK not in str(exc), f"password in {exc}"


class FrameRig:
    """A running monitor (ManualClock, ``max_topics`` = :data:`MAX_TOPICS`) and its books."""

    def __init__(self, key: bytes | None = None) -> None:
        self.clock = hw.ManualClock()
        self.mon = HeartbeatMonitor(
            None, PATTERN, clock=self.clock, key=key, max_topics=MAX_TOPICS, listener_queue=64
        )
        self.mon.expect("svc.real")
        self.mon.start()
        self.frames = 0

    def total(self) -> int:
        stats = self.mon.stats()
        return int(stats["beats"]) + sum(stats["rejected"].values())

    def feed(self, message: Any) -> None:
        before = self.total()
        self.mon.handle_message(message)  # must never raise
        self.frames += 1
        after = self.total()
        assert after == before + 1, f"frame neither recorded nor counted once: {message!r:.300}"
        assert len(self.mon) <= MAX_TOPICS, f"{len(self.mon)} topics > max_topics"

    def close(self) -> None:
        self.mon.stop(timeout=5.0)


def message_from(data: bytes) -> Message:
    """A frame from fuzz bytes: first byte picks the destination form, the rest splits into a
    destination header, a few hostile headers and the body."""
    if not data:
        return Message("svc.a", b"")
    mode, rest = data[0], data[1:]
    dest_raw, _, rest = rest.partition(b"\n")
    head_raw, _, body = rest.partition(b"\n\n")
    dest_text = dest_raw.decode("utf-8", "replace")
    dialect = RABBITMQ if mode & 1 else ACTIVEMQ
    if mode & 2:
        dest_text = "/topic/" + dest_text
    try:
        destination = dialect.topic(dest_text)
    except Exception:  # the transport drops such a frame before the monitor sees it
        destination = dest_text
    headers: dict[str, str] = {}
    for line in head_raw.decode("utf-8", "replace").split("\n")[:16]:
        name, _, value = line.partition(":")
        headers[name] = value
    if mode & 4:  # the topic the body names, as the destination
        with contextlib.suppress(Exception):
            destination = json.loads(body).get("topic", destination)
    return Message(destination, body, MappingProxyType(headers))


def frame_bytes(body: bytes, destination: str = "svc.a", mode: int = 0) -> bytes:
    """The fuzz input :func:`message_from` turns into ``Message(destination, body)``."""
    return bytes([mode]) + destination.encode() + b"\ncontent-type:text/plain\nx:y\n\n" + body


FRAME_SEEDS = [
    frame_bytes(b, d) for b, d in zip(SEEDS, ["svc.a", "svc.a", "svc.b.c"], strict=False)
] + [frame_bytes(b, "", 4) for b in SEEDS]

_RIG: FrameRig | None = None


def frame(data: bytes) -> None:
    global _RIG
    if _RIG is None:
        _RIG = FrameRig()
    _RIG.feed(message_from(data))


TARGETS = {"decode": decode, "url": url, "frame": frame}


# -- frames for the suite -------------------------------------------------------------------

_HOSTILE_VALUES: list[Any] = [
    None,
    True,
    -1,
    0,
    2**64,
    2**70,
    1e308,
    -0.0,
    "",
    "x" * 300,
    [],
    {},
    {"a": [1] * 50},
    "svc.*",
    "svc.>",
    "svc..a",
    " svc.a",
    "svc.\u00e9",
    "other.a",
]
_FIELDS = ["v", "topic", "seq", "boot", "sent", "period", "payload", "sig"]


def mutated_frames(rng: random.Random, n: int) -> Iterator[Message]:
    """``n`` frames: valid beats (some for many made-up topics), byte-level mutations of the
    seeds, field-level swaps with hostile values, random bytes, hostile destinations."""
    for i in range(n):
        kind = rng.randrange(8)
        seed = rng.choice(SEEDS)
        destination: Any = None
        if kind == 0:  # a valid beat, often for a new topic
            topic = f"svc.t{rng.randrange(10_000)}" if rng.random() < 0.7 else "svc.real"
            body = _PLAIN.encode(Beat(topic, seq=i, period=rng.choice([None, 0.5, 1.0, 2.0])))
            destination = topic
        elif kind == 1:  # byte flips, insertions, deletions
            b = bytearray(seed)
            for _ in range(rng.randrange(1, 6)):
                op, at = rng.randrange(3), rng.randrange(len(b) + 1)
                if op == 0 and at < len(b):
                    b[at] = rng.randrange(256)
                elif op == 1:
                    b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
                else:
                    del b[at : at + rng.randrange(1, 8)]
            body = bytes(b)
        elif kind == 2:  # a field swapped for a hostile value
            try:
                obj = json.loads(seed)
            except ValueError:
                obj = {"v": 1, "topic": "svc.a"}
            obj[rng.choice(_FIELDS)] = rng.choice(_HOSTILE_VALUES)
            body = json.dumps(obj).encode()
        elif kind == 3:  # random bytes
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        elif kind == 4:  # truncated
            body = seed[: rng.randrange(len(seed))]
        elif kind == 5:  # deep nesting, huge numbers, odd JSON
            body = rng.choice(
                [
                    b"[" * 5000 + b"]" * 5000,
                    b'{"v":1,"topic":"svc.a","payload":' + b"[" * 3000 + b"]" * 3000 + b"}",
                    b'{"v":1,"topic":"svc.a","seq":' + b"9" * 5000 + b"}",
                    b'{"v":1,"topic":"svc.a","sent":NaN}',
                    b'{"v":1,"topic":"svc.a","v":2}',
                    b'{"v":1.0,"topic":"svc.a"}',
                    b"\xef\xbb\xbf" + seed,
                    seed + b"\x00",
                    b"HEARTBEAT",
                    b"svc.a  HEARTBEAT",
                    b"svc.* HEARTBEAT",
                ]
            )
        elif kind == 6:  # a legacy beat for a made-up topic, maybe outside the pattern
            prefix = rng.choice(["svc", "other", "svc.deep.er"])
            body = f"{prefix}.l{rng.randrange(10_000)} HEARTBEAT".encode()
        else:  # a signed beat (this monitor has no key: accepted, sig ignored) or tampered
            body = bytearray(_SIGNED.encode(Beat(f"svc.s{rng.randrange(100)}", seq=i)))
            if rng.random() < 0.5:
                body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
            body = bytes(body)
        if destination is None:
            destination = rng.choice(
                [
                    None,
                    "svc.a",
                    "svc.real",
                    "",
                    "svc.*",
                    "x" * rng.randrange(1, 70_000),
                    "\udcff",
                    "svc.a\x00",
                    _topic_of(body),
                ]
            )
        headers = {
            "destination": str(destination)[:100],
            "content-length": str(rng.randrange(-5, 10**9)),
            "\x00": "\n" * rng.randrange(4),
            "x" * rng.randrange(1, 500): "y" * rng.randrange(0, 500),
        }
        yield Message(destination, body, MappingProxyType(headers))


def _topic_of(body: bytes) -> Any:
    try:
        return json.loads(body).get("topic")
    except Exception:
        text = body.decode("utf-8", "replace").strip()
        return text.split(" ")[0] if text.endswith("HEARTBEAT") else "svc.a"
