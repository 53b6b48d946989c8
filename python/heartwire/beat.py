"""The beat on the wire: JSON beats, the legacy text form, optional HMAC-SHA256 signatures.

A JSON beat is one compact object::

    {"v":1,"topic":"svc.a","seq":7,"boot":"3f2c...","sent":1718000000.25,"period":1.0,
     "payload":{"load":0.3},"sig":"<hex>"}

Only ``v`` and ``topic`` are required; the other fields are left out when unknown. A beat that
says its sender is failing carries ``"state":"down"`` and, optionally, ``"reason"`` (1 to
:data:`MAX_REASON_LEN` characters); ``state`` is ``"up"`` when absent (and left out when up,
so up beats read as they always did). With a shared
key, ``sig`` is the hex HMAC-SHA256 of the *canonical* JSON of every other field (keys sorted, no
spaces, ASCII only), so a receiver recomputes it from what it parsed. Fields a receiver does not
know are kept in the signed text and otherwise ignored, so newer publishers stay readable.

The legacy form, sent by existing JMS heartbeat publishers, is the text ``"<topic> HEARTBEAT"``;
it carries no sequence number, period or signature.

:meth:`BeatCodec.decode` never raises anything but :class:`DecodeError`, whose ``reason`` is one
of :data:`DECODE_REASONS`, whatever bytes it is given.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from heartwire import _validate
from heartwire.transport.patterns import validate_topic

__all__ = [
    "DECODE_REASONS",
    "MAX_REASON_LEN",
    "MAX_SEQ",
    "STATES",
    "VERSION",
    "Beat",
    "BeatCodec",
    "DecodeError",
]

#: The beat format version written in ``v``.
VERSION = 1
#: The largest sequence number (the core keeps it as an unsigned 64-bit integer).
MAX_SEQ = 2**64 - 1
#: The longest boot id accepted, in characters.
MAX_BOOT_ID_LEN = 256
#: The longest ``reason`` accepted, in characters.
MAX_REASON_LEN = 256
#: The values of ``state``: ``"up"`` (the default) and ``"down"`` (the sender says it fails).
STATES = ("up", "down")

#: Every ``DecodeError.reason``.
DECODE_REASONS = frozenset(
    {
        "too_large",  # the body is longer than max_size bytes
        "not_utf8",  # the body is not UTF-8 text
        "bad_json",  # neither a JSON object nor the legacy text form
        "bad_field",  # a known field is missing, of the wrong type or out of range
        "unsigned",  # a key is set but the beat has no signature (legacy beats never do)
        "bad_signature",  # the signature does not match
        "topic_mismatch",  # the beat names another topic than the one it arrived on
    }
)

_LEGACY = re.compile(r"(\S+) HEARTBEAT")
_SIG_HEX = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class Beat:
    """One heartbeat.

    ``sent_at`` is the publisher's wall clock (epoch seconds) when it sent the beat; ``period``
    the publisher's period in seconds, so monitors learn it; ``boot_id`` changes each time a
    publisher is created, so restarts show; ``legacy`` is True for beats that came in the
    ``"<topic> HEARTBEAT"`` text form. ``state`` is ``"down"`` when the sender says it is
    failing (an explicit failure, see ``docs/explicit-failure.md``), with ``reason`` saying why
    (``None`` if not given); ``"up"`` otherwise.
    """

    topic: str
    seq: int | None = None
    boot_id: str | None = None
    sent_at: float | None = None
    period: float | None = None
    payload: Any = None
    legacy: bool = False
    state: str = "up"
    reason: str | None = None


_new = object.__new__


def _beat(
    topic: str,
    seq: int | None,
    boot_id: str | None,
    sent_at: float | None,
    period: float | None,
    payload: Any,
    state: str,
    reason: str | None,
) -> Beat:
    """``Beat(...)`` for checked fields, without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` call per field): the decoder builds one per message."""
    beat: Beat = _new(Beat)
    beat.__dict__.update(
        topic=topic,
        seq=seq,
        boot_id=boot_id,
        sent_at=sent_at,
        period=period,
        payload=payload,
        legacy=False,
        state=state,
        reason=reason,
    )
    return beat


class DecodeError(ValueError):
    """A message body that is not an acceptable beat.

    ``reason`` is a short stable code from :data:`DECODE_REASONS` (counted by monitors);
    ``detail`` says what exactly was wrong.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.detail))


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


# One decoder for every message: ``json.loads`` with keyword arguments would build a new
# ``JSONDecoder`` (and its scanner) per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class BeatCodec:
    """Encode beats to bytes and decode bytes to beats.

    ``key`` (bytes, or str taken as UTF-8) turns on signatures: encoded beats are signed, and
    decoding rejects legacy and unsigned beats (``"unsigned"``) and wrong signatures
    (``"bad_signature"``). ``max_size`` is the largest body, in bytes, that decode looks at.
    Instances are immutable and safe to share between threads.
    """

    __slots__ = ("_key", "max_size")

    def __init__(self, key: bytes | str | None = None, max_size: int = 65536) -> None:
        if isinstance(key, str):
            key = key.encode("utf-8")
        if key is not None:
            if not isinstance(key, (bytes, bytearray)):
                raise TypeError(f"key must be bytes, str or None, got {type(key).__name__}")
            if not key:
                raise ValueError("key must not be empty, got b''")
            key = bytes(key)
        self._key = key
        self.max_size = _validate.count(max_size, "max_size", 16)

    @property
    def signed(self) -> bool:
        """Whether this codec signs beats and requires signatures."""
        return self._key is not None

    def __repr__(self) -> str:
        return f"BeatCodec(signed={self.signed}, max_size={self.max_size})"

    def _sign(self, canonical: bytes) -> str:
        assert self._key is not None
        return hmac.new(self._key, canonical, hashlib.sha256).hexdigest()

    # -- signed JSON objects (beats, and control messages: heartwire.control) ----------------

    def seal(self, obj: dict[str, Any]) -> bytes:
        """``obj`` as compact JSON, with ``"sig"`` (the HMAC-SHA256 of the canonical JSON of
        every other field) added when this codec has a key. ``ValueError``/``TypeError`` from
        :mod:`json` for what it cannot write."""
        canonical = _canonical(obj)
        if self._key is None:
            return canonical
        return canonical[:-1] + b',"sig":"' + self._sign(canonical).encode("ascii") + b'"}'

    def unseal(self, text: str, what: str = "message") -> dict[str, Any]:
        """The JSON object in ``text``, its signature checked (and removed) when this codec has
        a key; :class:`DecodeError` (``"bad_json"``, ``"unsigned"``, ``"bad_signature"``)
        otherwise (their details name ``what``). The fields are the caller's to check."""
        try:
            obj = _DECODER.decode(text)
        except (ValueError, RecursionError) as exc:
            raise DecodeError("bad_json", str(exc)[:200]) from None
        if not isinstance(obj, dict):
            raise DecodeError("bad_json", f"a JSON {type(obj).__name__}, not an object")
        if self._key is not None:
            sig = obj.pop("sig", None)
            if sig is None:
                raise DecodeError("unsigned", f"the {what} has no 'sig'")
            if not isinstance(sig, str) or not _SIG_HEX.fullmatch(sig):
                raise DecodeError("bad_signature", "'sig' is not 64 hex digits")
            try:
                canonical = _canonical(obj)
            except (ValueError, RecursionError) as exc:  # pragma: no cover - parsed JSON dumps
                raise DecodeError("bad_json", str(exc)[:200]) from None
            if not hmac.compare_digest(self._sign(canonical), sig.lower()):
                raise DecodeError("bad_signature", f"the signature does not match the {what}")
        return obj

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, beat: Beat) -> bytes:
        """The bytes of ``beat``: JSON (signed when a key is set), or the legacy text form.

        Raises :class:`ValueError` (:class:`TypeError` for a wrong type) naming the field when a
        field would not decode, e.g. a negative ``seq`` or a payload that is not JSON-able.
        """
        validate_topic(beat.topic, "beat.topic")
        state = _check_state(beat.state, "beat.state", ValueError)
        if beat.legacy:
            if self._key is not None:
                raise ValueError("a legacy beat cannot be signed; this codec has a key")
            if state != "up" or beat.reason is not None:
                raise ValueError("a legacy beat cannot say down or carry a reason")
            return f"{beat.topic} HEARTBEAT".encode("ascii")
        obj: dict[str, Any] = {"v": VERSION, "topic": beat.topic}
        if beat.seq is not None:
            obj["seq"] = _check_seq(beat.seq, "beat.seq", ValueError)
        if beat.boot_id is not None:
            obj["boot"] = _check_boot(beat.boot_id, "beat.boot_id", ValueError)
        if beat.sent_at is not None:
            obj["sent"] = _check_sent(beat.sent_at, "beat.sent_at", ValueError)
        if beat.period is not None:
            obj["period"] = _check_period(beat.period, "beat.period", ValueError)
        if beat.payload is not None:
            obj["payload"] = beat.payload
        if state != "up":
            obj["state"] = state
        if beat.reason is not None:
            obj["reason"] = _check_reason(beat.reason, "beat.reason", ValueError)
        try:
            return self.seal(obj)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"beat.payload is not JSON-serializable: {exc}") from exc
        except RecursionError as exc:
            raise ValueError("beat.payload is nested too deeply to serialize") from exc

    # -- decoding ---------------------------------------------------------------------------

    def decode(
        self, body: bytes | bytearray | memoryview | str, destination: str | None = None
    ) -> Beat:
        """The beat in ``body``; raises :class:`DecodeError` and nothing else for a bad body.

        ``destination`` is the topic the message arrived on; a beat naming another topic is
        rejected (``"topic_mismatch"``).
        """
        if isinstance(body, str):
            text = body
            if len(text) > self.max_size:  # each character takes at least one byte
                raise DecodeError("too_large", f"{len(text)} characters, limit {self.max_size}")
        else:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise DecodeError("bad_json", f"body is a {type(body).__name__}, not bytes")
            size = body.nbytes if isinstance(body, memoryview) else len(body)
            if size > self.max_size:
                raise DecodeError("too_large", f"{size} bytes, limit {self.max_size}")
            try:
                text = (body if isinstance(body, bytes) else bytes(body)).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError("not_utf8", str(exc)) from None
        stripped = text.strip()
        if not stripped.startswith("{"):
            beat = self._decode_legacy(stripped)
        else:
            beat = self._decode_json(stripped)
        if destination is not None and destination != beat.topic:
            raise DecodeError(
                "topic_mismatch",
                f"beat for {beat.topic!r:.100} arrived on {destination!r:.100}",
            )
        return beat

    def _decode_legacy(self, text: str) -> Beat:
        match = _LEGACY.fullmatch(text)
        if match is None:
            shown = text[:60] + ("..." if len(text) > 60 else "")
            raise DecodeError(
                "bad_json", f"neither a JSON object nor '<topic> HEARTBEAT': {shown!r}"
            )
        if self._key is not None:
            raise DecodeError("unsigned", "a legacy text beat carries no signature")
        try:
            topic = validate_topic(match.group(1))
        except ValueError as exc:
            raise DecodeError("bad_field", str(exc)[:300]) from None
        return Beat(topic, legacy=True)

    def _decode_json(self, text: str) -> Beat:
        obj = self.unseal(text, "beat")
        version = obj.get("v")
        if version != VERSION or not _is_number(version):
            raise DecodeError("bad_field", f"v must be {VERSION}, got {version!r}"[:200])
        topic = obj.get("topic")
        try:
            validate_topic(topic, "topic")
            seq = obj.get("seq")
            boot = obj.get("boot")
            sent = obj.get("sent")
            period = obj.get("period")
            state = obj.get("state")
            reason = obj.get("reason")
            return _beat(
                topic,  # type: ignore[arg-type]
                None if seq is None else _check_seq(seq, "seq", DecodeError),
                None if boot is None else _check_boot(boot, "boot", DecodeError),
                None if sent is None else _check_sent(sent, "sent", DecodeError),
                None if period is None else _check_period(period, "period", DecodeError),
                obj.get("payload"),
                "up" if state is None else _check_state(state, "state", DecodeError),
                None if reason is None else _check_reason(reason, "reason", DecodeError),
            )
        except DecodeError:
            raise
        except (TypeError, ValueError) as exc:
            raise DecodeError("bad_field", str(exc)[:300]) from None


# Field checks shared by encode (raising ValueError/TypeError) and decode (raising DecodeError).


def _fail(error: type[Exception], message: str, type_error: bool = False) -> Exception:
    if error is DecodeError:
        return DecodeError("bad_field", message[:300])
    return TypeError(message) if type_error else error(message)


def _check_seq(value: object, field: str, error: type[Exception]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(error, f"{field} must be an int, got {type(value).__name__} {value!r}", True)
    if not 0 <= value <= MAX_SEQ:
        raise _fail(error, f"{field} must be in 0..2**64-1, got {value!r}")
    return value


def _check_boot(value: object, field: str, error: type[Exception]) -> str:
    if not isinstance(value, str):
        raise _fail(error, f"{field} must be a str, got {type(value).__name__} {value!r}", True)
    if not value or len(value) > MAX_BOOT_ID_LEN:
        raise _fail(error, f"{field} must be 1 to {MAX_BOOT_ID_LEN} characters, got {value!r}")
    return value


def _check_sent(value: object, field: str, error: type[Exception]) -> float:
    if not _is_number(value):
        raise _fail(error, f"{field} must be a number, got {type(value).__name__} {value!r}", True)
    try:
        sent = float(value)  # type: ignore[arg-type]
    except OverflowError:
        sent = math.inf
    if not math.isfinite(sent):
        raise _fail(error, f"{field} must be finite, got {value!r}")
    return sent


def _check_period(value: object, field: str, error: type[Exception]) -> float:
    if not _is_number(value):
        raise _fail(error, f"{field} must be a number, got {type(value).__name__} {value!r}", True)
    try:
        period = float(value)  # type: ignore[arg-type]
    except OverflowError:
        period = math.inf
    if not (period > 0 and math.isfinite(period)):
        raise _fail(error, f"{field} must be a positive finite number of seconds, got {value!r}")
    return period


def _check_state(value: object, field: str, error: type[Exception]) -> str:
    if not isinstance(value, str):
        raise _fail(error, f"{field} must be a str, got {type(value).__name__} {value!r}", True)
    if value not in STATES:
        raise _fail(error, f"{field} must be 'up' or 'down', got {value!r:.100}")
    return value


def _check_reason(value: object, field: str, error: type[Exception]) -> str:
    if not isinstance(value, str):
        raise _fail(error, f"{field} must be a str, got {type(value).__name__} {value!r}", True)
    if not value or len(value) > MAX_REASON_LEN:
        raise _fail(error, f"{field} must be 1 to {MAX_REASON_LEN} characters, got {len(value)}")
    return value
