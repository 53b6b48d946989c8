"""The native STOMP splitter (``heartwire._core.split_frames``) against stomp.py's own framing.

The native reader will hand stomp.py only the frames it does not consume. These tests check that
stomp.py, reading what is passed, sees exactly the frames it would have seen in the whole stream
minus the consumed ones, and that the consumed ones carry the body stomp.py would have parsed,
whatever the chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stomp.transport import BaseTransport  # type: ignore[import-untyped]
from stomp.utils import parse_frame  # type: ignore[import-untyped]

from heartwire._core import split_frames

SUB = b"hb"


class _Reader(BaseTransport):  # type: ignore[misc]
    """stomp.py's receive loop over a fixed byte string."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = [data] if data else []
        self.running = True
        self.blocking = False  # an empty read ends the loop instead of raising

    def receive(self) -> bytes:
        return self._data.pop(0) if self._data else b""


def stomp_frames(stream: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """The frames stomp.py parses from ``stream`` (heart-beats left out)."""
    reader = _Reader(stream)
    raw = reader._BaseTransport__read()
    frames = []
    for f in raw:
        parsed = parse_frame(f)
        if parsed is not None and parsed.cmd:
            frames.append((parsed.cmd, parsed.headers, bytes(parsed.body)))
    return frames


@dataclass
class Spec:
    data: bytes
    consumed: bool  # the native splitter must consume it (a well-formed MESSAGE on SUB)


def _frame(
    cmd: bytes, headers: list[tuple[bytes, bytes]], body: bytes, crlf: bool, length: bool
) -> bytes:
    eol = b"\r\n" if crlf else b"\n"
    if length:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    lines = [cmd] + [k + b":" + v for k, v in headers]
    return eol.join(lines) + eol + eol + body + b"\0"


_bodies = st.binary(max_size=40)


@st.composite
def _specs(draw: st.DrawFn) -> Spec:
    kind = draw(st.sampled_from(["beat", "beat", "other", "receipt", "error", "malformed"]))
    crlf = draw(st.booleans())
    n = draw(st.integers(min_value=0, max_value=999))
    body = draw(_bodies)
    length = draw(st.booleans())
    if not length:
        body = body.replace(b"\0", b"")
    if kind == "beat":
        headers = [
            (b"destination", b"/topic/svc.a" + str(n).encode()),
            (b"subscription", SUB),
            (b"message-id", b"ID\\c" + str(n).encode()),
        ]
        return Spec(_frame(b"MESSAGE", headers, body, crlf, length), True)
    if kind == "other":
        headers = [(b"subscription", b"other"), (b"destination", b"/queue/x")]
        return Spec(_frame(b"MESSAGE", headers, body, crlf, length), False)
    if kind == "receipt":
        return Spec(_frame(b"RECEIPT", [(b"receipt-id", str(n).encode())], b"", crlf, False), False)
    if kind == "error":
        return Spec(_frame(b"ERROR", [(b"message", b"boom")], body, crlf, length), False)
    # A MESSAGE on SUB that the strict parse refuses: stomp.py must still get it, intact.
    variant = draw(st.sampled_from(["no-colon", "spaced-length", "empty-name"]))
    eol = b"\r\n" if crlf else b"\n"
    body = body.replace(b"\0", b"")
    extra = {
        "no-colon": b"garbage",
        "spaced-length": b"content-length: " + str(len(body)).encode(),
        "empty-name": b":x",
    }[variant]
    data = eol.join([b"MESSAGE", b"subscription:hb", extra]) + eol + eol + body + b"\0"
    return Spec(data, False)


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[Spec], bytes, list[bytes]]:
    specs = draw(st.lists(_specs(), max_size=12))
    parts = []
    for i, spec in enumerate(specs):
        # Heart-beats between frames: LFs, or one CRLF. stomp.py itself mis-reads some runs as
        # an empty header block and drops the frame ("\r\n\r\n" or "\r\n\n" before a frame,
        # or LFs before the first frame of its buffer), so the reference stays clear of those.
        if i > 0:
            parts.append(draw(st.sampled_from([b"", b"", b"\n", b"\n\n\n", b"\r\n"])))
        parts.append(spec.data)
    stream = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    return specs, stream, chunks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_stomp_py_sees_the_same_frames_minus_the_consumed(
    case: tuple[list[Spec], bytes, list[bytes]],
) -> None:
    specs, stream, chunks = case
    whole = stomp_frames(stream)
    assert len(whole) == len(specs)  # the reference reads every generated frame
    consumed, out, pending, _eols = split_frames(chunks, SUB)
    assert pending == 0
    kept = [f for f, s in zip(whole, specs, strict=True) if not s.consumed]
    taken = [f for f, s in zip(whole, specs, strict=True) if s.consumed]
    assert stomp_frames(out) == kept
    # out is exactly the passed frames' bytes, in order
    assert out == b"".join(s.data for s in specs if not s.consumed)
    assert [(d, b) for d, b, _ in consumed] == [(f[1]["destination"].encode(), f[2]) for f in taken]
    assert all(escaped for _, _, escaped in consumed)  # message-id holds '\\c'


def test_escaped_destination_is_flagged_and_kept_raw() -> None:
    frame = b"MESSAGE\nsubscription:hb\ndestination:/topic/svc.eu\\c1\n\nx\0"
    consumed, out, pending, eols = split_frames([frame, b"\n"], SUB)
    assert consumed == [(b"/topic/svc.eu\\c1", b"x", True)]
    assert (out, pending, eols) == (b"", 0, 1)
    # stomp.py unescapes the same raw value to the name the broker meant
    assert stomp_frames(frame)[0][1]["destination"] == "/topic/svc.eu:1"


def test_incomplete_frame_is_held_and_counted() -> None:
    consumed, out, pending, _ = split_frames([b"MESSAGE\nsubscription:hb\n\nabc"], SUB)
    assert (consumed, out, pending) == ([], b"", 28)


def test_heart_beats_before_a_frame_are_dropped_so_stomp_py_keeps_the_frame() -> None:
    receipt = b"RECEIPT\nreceipt-id:1\n\n\0"
    stream = b"\n\n\r\n" + receipt
    assert stomp_frames(stream) == []  # stomp.py alone reads "\n\n" as an empty header block
    consumed, out, pending, eols = split_frames([stream[:2], stream[2:]], SUB)
    assert (consumed, out, pending, eols) == ([], receipt, 0, 3)
    assert stomp_frames(out) == [("RECEIPT", {"receipt-id": "1"}, b"")]
