"""Control messages: silences sent over the broker, signed, to every monitor listening.

One message silences (or lifts a silence on) every monitor that subscribes to the control topic
(:data:`CONTROL_TOPIC` unless told otherwise) and holds the key: ``heartwire silence 'svc.db.>'
--for 30m --broker URL --key ...`` or :func:`send_silence`. The format (version 2) is one
compact JSON object, signed as beats are (:meth:`heartwire.beat.BeatCodec.seal`: ``sig`` is the
hex HMAC-SHA256 of the canonical JSON of every other field)::

    {"hwctl":2,"op":"silence","dest":"_hw.control","id":"5b0c...","pattern":"svc.db.>",
     "until":1764000000.0,"reason":"db upgrade","sent":1763998200.0,"nonce":"e3b1...",
     "sig":"<hex>"}
    {"hwctl":2,"op":"unsilence","dest":"_hw.control","id":"5b0c...","sent":1763998500.0,
     "nonce":"77a0...","sig":"<hex>"}

- ``hwctl``: the format version, 2 (version 1 had no ``dest``: it is refused as ``malformed``,
  since its copy on another control topic could not be told apart). A beat has no ``hwctl``
  and a control message no ``v`` or ``topic``, so neither is ever taken for the other.
- ``dest``: the control topic the message was sent to, signed with the rest: a monitor takes
  only those whose ``dest`` is its own control topic, so a silence sent to one set of
  monitors (``_hw.ctl.staging``) and copied to another's topic (``_hw.ctl.prod``) by whoever
  may publish there is refused (``wrong_destination``).
- ``op``: ``"silence"`` or ``"unsilence"``.
- ``id``: the silence's id, chosen by the sender (1 to 64 letters, digits, ``_ - . :``); an
  ``unsilence`` names the silence to lift (only silences made by control messages).
- ``pattern`` (silence): a topic pattern as for ``mon.silence``.
- ``until`` (silence): when the silence ends, as Unix seconds (the sender's wall clock), after
  ``sent`` and at most :data:`MAX_CONTROL_SILENCE` (30 days) after it. An end time rather than
  a duration, so that the message means the same on every monitor whenever it
  is read: a monitor that reads it later (a slow consumer, a reconnection) does not silence for
  longer, and every monitor lifts it at the same moment. The age bound below keeps the
  senders' and monitors' clocks within a minute or so of each other anyway.
- ``reason`` (silence, optional): up to :data:`~heartwire.beat.MAX_REASON_LEN` characters.
- ``sent``: the sender's wall clock (Unix seconds); ``nonce``: 16 to 128 letters, digits, ``_``
  or ``-``, new for each message. Fields not known here are ignored (and signed).

A monitor refuses (counts by reason in ``stats()["control_refused"]``, reports to
``on_exception`` as ``"control_<reason>"``, logs the first ten of each reason, then one in a
thousand) a message that is: ``too_large`` (over 64 KiB), ``malformed`` (not a JSON object of
this format; the detail names the field: ``until`` more than 30 days after ``sent`` too, or
a time this monitor cannot hold), ``unsigned``, ``bad_signature``, ``wrong_destination``
(``dest`` is not the topic it arrived on), ``stale`` (``sent``
further from the monitor's wall clock than the monitor's ``max_beat_age``, or, when that is
``None``, than what a beat of a new topic is allowed: ``BEAT_AGE_PERIODS`` of the monitor's
period plus ``BEAT_AGE_SKEW``), ``replayed`` (a nonce already taken, or a silence id already
made), ``expired`` (a silence whose ``until`` has passed on the monitor's clock),
``unknown_silence`` (an ``unsilence`` of an id it does not know) or ``failed`` (a message that
passed every check but could not be applied: an error in the monitor, logged with its
traceback). Reports name the reason and the field, never the key or the signature.

Where messages are applied: a silence on the thread that read it (the transport's: registering
a silence emits no event, so it never waits), an unsilence on a worker thread of the receiver's
(lifting a silence may release alerts, and with an ``overflow="block"`` queue wait for room:
the transport's thread, which reads the beats and the broker's heart-beats, must not wait).
:meth:`ControlReceiver.wait` waits for the unsilences handed over (``mon.drain`` does, and
``mon.stop`` before it stops the detector: the alerts they release come before ``on_stopped``).
A message whose handler runs on after ``mon.stop`` cancelled the subscription is dropped
(:meth:`ControlReceiver.close`), as one sent after it.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from heartwire._throttle import worth_logging
from heartwire.beat import MAX_REASON_LEN, BeatCodec, DecodeError
from heartwire.policy import silence_end
from heartwire.transport import Message, Transport, connect
from heartwire.transport.patterns import validate_pattern, validate_topic

__all__ = [
    "CONTROL_OPS",
    "CONTROL_REASONS",
    "CONTROL_TOPIC",
    "CONTROL_VERSION",
    "MAX_CONTROL_SILENCE",
    "RESERVED_PREFIX",
    "ControlError",
    "ControlMessage",
    "ControlReceiver",
    "send_silence",
    "send_unsilence",
]

log = logging.getLogger("heartwire.control")

#: The prefix of heartwire's own topics (control, the STOMP keep-alive pings): no monitor takes
#: them for beats, whatever its pattern (the core's intake passes them on, the monitor skips
#: them: ``rust/python/intake.rs`` has the same prefix).
RESERVED_PREFIX = "_hw."
#: The default control topic (``/topic/_hw.control`` on a STOMP broker).
CONTROL_TOPIC = f"{RESERVED_PREFIX}control"
#: The format version written in ``hwctl`` (2: ``dest`` signed; 1, without it, is refused).
CONTROL_VERSION = 2
#: The longest silence a control message may ask for (seconds from its ``sent``): 30 days. A
#: longer one is refused (``ValueError`` when made, ``malformed`` when read): a silence for
#: longer is a window (``mon.maintenance``) or a configuration change, not a message.
MAX_CONTROL_SILENCE = 30 * 86400.0
#: The largest control message read, in bytes (a beat's limit).
MAX_CONTROL_SIZE = 65536
#: How many nonces (and ids of silences over) a receiver remembers at most; past it the oldest
#: are let go (only reachable with an unbounded age, ``max_beat_age=math.inf``: otherwise those
#: older than the age bound are let go first, being refused as stale anyway). The ids of
#: silences still in force are kept whatever their number (each is a silence in the core too),
#: so an unsilence always finds its silence.
MAX_REMEMBERED = 65536

#: Every reason a receiver refuses a control message for.
CONTROL_REASONS = frozenset(
    {
        "too_large",
        "malformed",
        "unsigned",
        "bad_signature",
        "wrong_destination",
        "stale",
        "replayed",
        "expired",
        "unknown_silence",
        "failed",
    }
)

Op = Literal["silence", "unsilence"]
#: Every control operation, in the order metrics list them.
CONTROL_OPS: tuple[Op, ...] = ("silence", "unsilence")
_OPS = CONTROL_OPS
_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")
_NONCE = re.compile(r"[A-Za-z0-9_\-]{16,128}")


class ControlError(ValueError):
    """A control message refused: ``reason`` is one of :data:`CONTROL_REASONS`, ``detail``
    says what was wrong (never the key or the signature)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.detail))


def _number(obj: dict[str, Any], name: str) -> float:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ControlError("malformed", f"{name} must be a number, got {value!r:.80}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ControlError("malformed", f"{name} must be finite, got {value!r:.80}")
    return number


def _string(obj: dict[str, Any], name: str, form: re.Pattern[str], what: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not form.fullmatch(value):
        raise ControlError("malformed", f"{name} must be {what}, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class ControlMessage:
    """One control message (see the module docs for the fields). Make one with
    :meth:`silence` or :meth:`unsilence` (fresh ``id``, ``nonce`` and ``sent``), publish its
    :meth:`encode` on its ``dest`` (or use :func:`send_silence`)."""

    op: Op
    id: str
    sent: float
    nonce: str
    pattern: str | None = None
    until: float | None = None
    reason: str = ""
    dest: str = CONTROL_TOPIC

    @classmethod
    def silence(
        cls,
        pattern: str,
        *,
        duration: float | _dt.timedelta | str | None = None,
        until: _dt.datetime | None = None,
        reason: str = "",
        id: str | None = None,
        destination: str = CONTROL_TOPIC,
    ) -> ControlMessage:
        """A silence of ``pattern`` from now for ``duration`` (seconds, a ``timedelta``, or
        ``"30s"``/``"30m"``/``"2h"``) or ``until`` an aware datetime: exactly one of them, at
        most :data:`MAX_CONTROL_SILENCE` (30 days) ahead, for the monitors listening on the
        control topic ``destination`` (signed: only they take it). ``ValueError``/
        ``TypeError`` naming the argument otherwise."""
        validate_pattern(pattern, "pattern")
        validate_topic(destination, "destination")
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__} {reason!r}")
        if len(reason) > MAX_REASON_LEN:
            raise ValueError(
                f"reason must be at most {MAX_REASON_LEN} characters, got {len(reason)}"
            )
        sent = time.time()
        end = silence_end(duration, until, sent)
        if end - sent > MAX_CONTROL_SILENCE:
            name, value = ("until", until) if duration is None else ("duration", duration)
            raise ValueError(
                f"{name} must end at most 30 days from now (a control silence's limit; a "
                f"longer one is a maintenance window), got {value!r}"
            )
        return cls("silence", _new_id(id), sent, _nonce(), pattern, end, reason, destination)

    @classmethod
    def unsilence(cls, id: str, *, destination: str = CONTROL_TOPIC) -> ControlMessage:
        """Lift the silence ``id`` (made by a control message) on every monitor listening on
        ``destination``."""
        if not isinstance(id, str) or not _ID.fullmatch(id):
            raise ValueError(
                f"id must be 1 to 64 letters, digits, '_', '-', '.' or ':', got {id!r:.80}"
            )
        validate_topic(destination, "destination")
        return cls("unsilence", id, time.time(), _nonce(), dest=destination)

    @property
    def until_utc(self) -> _dt.datetime | None:
        """``until`` as an aware datetime in UTC (None for an unsilence)."""
        if self.until is None:
            return None
        return _dt.datetime.fromtimestamp(self.until, tz=_dt.timezone.utc)

    def encode(self, key: bytes | str | BeatCodec) -> bytes:
        """The message's bytes, signed with ``key`` (required: monitors take only signed
        control messages)."""
        codec = key if isinstance(key, BeatCodec) else BeatCodec(key)
        if not codec.signed:
            raise ValueError("key must be given: monitors honour only signed control messages")
        obj: dict[str, Any] = {
            "hwctl": CONTROL_VERSION,
            "op": self.op,
            "dest": self.dest,
            "id": self.id,
            "sent": self.sent,
            "nonce": self.nonce,
        }
        if self.op == "silence":
            obj.update(pattern=self.pattern, until=self.until)
            if self.reason:
                obj["reason"] = self.reason
        return codec.seal(obj)

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview, codec: BeatCodec) -> ControlMessage:
        """The message in ``body``, its signature checked with ``codec``'s key; raises
        :class:`ControlError` (reasons ``too_large``, ``malformed``, ``unsigned``,
        ``bad_signature``) and nothing else. A silence's ``until`` is after ``sent``, at most
        :data:`MAX_CONTROL_SILENCE` after it, and a time a datetime can hold."""
        size = body.nbytes if isinstance(body, memoryview) else len(body)
        if size > MAX_CONTROL_SIZE:
            raise ControlError("too_large", f"{size} bytes, limit {MAX_CONTROL_SIZE}")
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ControlError("malformed", f"not UTF-8: {exc}"[:200]) from None
        try:
            obj = codec.unseal(text)
        except DecodeError as exc:
            reason = "malformed" if exc.reason == "bad_json" else exc.reason
            detail = f"not JSON: {exc.detail}" if reason == "malformed" else exc.detail
            raise ControlError(reason, detail) from None
        version = obj.get("hwctl")
        if isinstance(version, bool) or version != CONTROL_VERSION:
            raise ControlError("malformed", f"hwctl must be {CONTROL_VERSION}, got {version!r:.80}")
        op = obj.get("op")
        if op not in _OPS:
            raise ControlError("malformed", f"op must be 'silence' or 'unsilence', got {op!r:.80}")
        dest = obj.get("dest")
        if not isinstance(dest, str):
            raise ControlError("malformed", f"dest must be a topic name, got {dest!r:.80}")
        try:
            validate_topic(dest, "dest")
        except (TypeError, ValueError) as exc:
            raise ControlError("malformed", str(exc)[:300]) from None
        sid = _string(obj, "id", _ID, "1 to 64 letters, digits, '_', '-', '.' or ':'")
        sent = _number(obj, "sent")
        nonce = _string(obj, "nonce", _NONCE, "16 to 128 letters, digits, '_' or '-'")
        if op == "unsilence":
            return cls("unsilence", sid, sent, nonce, dest=dest)
        pattern = obj.get("pattern")
        try:
            validate_pattern(pattern, "pattern")
        except (TypeError, ValueError) as exc:
            raise ControlError("malformed", str(exc)[:300]) from None
        until = _number(obj, "until")
        if until <= sent:
            raise ControlError("malformed", f"until ({until}) must be after sent ({sent})")
        if until - sent > MAX_CONTROL_SILENCE:
            raise ControlError(
                "malformed",
                f"until ({until}) must be at most {MAX_CONTROL_SILENCE:.0f} s (30 days) after "
                f"sent ({sent})",
            )
        try:
            _dt.datetime.fromtimestamp(until, tz=_dt.timezone.utc)
        except (OverflowError, ValueError, OSError):
            raise ControlError("malformed", f"until ({until}) is no date") from None
        reason = obj.get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_REASON_LEN:
            raise ControlError(
                "malformed", f"reason must be a str of at most {MAX_REASON_LEN} characters"
            )
        try:
            reason.encode("utf-8")
        except UnicodeEncodeError:  # JSON can carry a lone surrogate; the core takes UTF-8
            raise ControlError("malformed", "reason is not valid Unicode text") from None
        return cls("silence", sid, sent, nonce, pattern, until, reason, dest)  # type: ignore[arg-type]


def _new_id(id: str | None) -> str:
    if id is None:
        return secrets.token_hex(8)
    if not isinstance(id, str) or not _ID.fullmatch(id):
        raise ValueError(
            f"id must be 1 to 64 letters, digits, '_', '-', '.' or ':', got {id!r:.80}"
        )
    return id


def _nonce() -> str:
    return secrets.token_hex(16)


# -- sending --------------------------------------------------------------------------------


def _send(
    broker: Transport | str, message: ControlMessage, key: bytes | str, timeout: float
) -> ControlMessage:
    body = message.encode(key)  # checks the key before connecting
    destination = message.dest
    if isinstance(broker, str):
        transport = connect(broker)
        try:
            transport.publish(destination, body, None, timeout=timeout)  # type: ignore[attr-defined]
        finally:
            transport.close()  # type: ignore[attr-defined]
    else:
        if not callable(getattr(broker, "publish", None)):
            raise TypeError(f"broker must be a Transport or a URL, got {type(broker).__name__}")
        broker.publish(destination, body, None, timeout=timeout)  # type: ignore[attr-defined]
    return message


def send_silence(
    broker: Transport | str,
    pattern: str,
    *,
    key: bytes | str,
    duration: float | _dt.timedelta | str | None = None,
    until: _dt.datetime | None = None,
    reason: str = "",
    destination: str = CONTROL_TOPIC,
    timeout: float = 10.0,
) -> ControlMessage:
    """Silence ``pattern`` on every monitor listening on ``destination`` with ``key``: for
    ``duration`` (seconds, a ``timedelta`` or ``"30m"``) or ``until`` an aware datetime.
    ``broker`` is a transport (left open) or a URL (connected to and closed). Returns the
    message sent: its ``id`` is what :func:`send_unsilence` takes. At most 30 days
    (:data:`MAX_CONTROL_SILENCE`). Only the monitors whose control topic is ``destination``
    take it (it is signed), and those not subscribed when it is sent do not get it (a topic,
    not a queue)."""
    message = ControlMessage.silence(
        pattern, duration=duration, until=until, reason=reason, destination=destination
    )
    return _send(broker, message, key, timeout)


def send_unsilence(
    broker: Transport | str,
    id: str,
    *,
    key: bytes | str,
    destination: str = CONTROL_TOPIC,
    timeout: float = 10.0,
) -> ControlMessage:
    """Lift the silence ``id`` (sent by :func:`send_silence`) on every monitor listening."""
    return _send(broker, ControlMessage.unsilence(id, destination=destination), key, timeout)


# -- receiving ------------------------------------------------------------------------------


class ControlReceiver:
    """A monitor's end of its control topic ``topic``: checks each message (signature,
    destination, age, replays) and applies it through ``silence(pattern, until, reason) ->
    silence id`` and ``unsilence(silence id) -> bool`` (the monitor's own methods);
    ``report(error)`` is told of each refusal. ``max_age()`` gives the age bound in seconds
    (``math.inf``: none). ``silence`` may raise :class:`ControlError` (``expired``); another
    ``ValueError`` or ``OverflowError`` is reported as ``malformed``, any other exception as
    ``failed`` (logged with its traceback): the message is counted either way and its silence
    id is free again.

    A silence is applied on the calling thread (the transport's: ``silence`` must not wait on
    another thread), an unsilence on a worker thread of the receiver's, started when one is
    handed over and ending when none is left (lifting a silence may emit events and wait for
    room in a ``"block"`` queue); :meth:`wait` waits for those handed over so far.

    Thread-safe: the tables are checked and updated under a lock, and the calls out (which
    may emit events, or call listeners) are made after it is let go.
    """

    def __init__(
        self,
        codec: BeatCodec,
        topic: str,
        silence: Callable[[str, _dt.datetime, str], int],
        unsilence: Callable[[int], bool],
        report: Callable[[ControlError], None],
        max_age: Callable[[], float],
    ) -> None:
        if not codec.signed:
            raise ValueError("a control receiver needs a key")
        validate_topic(topic, "topic")
        self._codec = codec
        self._topic = topic
        self._silence = silence
        self._unsilence = unsilence
        self._report = report
        self._max_age = max_age
        self._lock = threading.Lock()
        self._nonces: OrderedDict[str, float] = OrderedDict()  # nonce -> sent
        # Control id -> (the monitor's silence id, until); None while being applied.
        self._ids: OrderedDict[str, tuple[int, float] | None] = OrderedDict()
        self._prune_at = 1024
        self._accepted: dict[str, int] = {}
        self._refused: dict[str, int] = {}
        # Unsilences handed to the worker (the monitor's silence ids); `_working`
        # while a worker runs (it ends when the queue is empty, both under `_idle`'s lock).
        self._idle = threading.Condition(self._lock)
        self._queue: deque[int] = deque()
        self._working = False
        self._worker: threading.Thread | None = None
        # Closed by the monitor's stop() (opened again by start()): a message whose handler
        # runs on after the subscription was cancelled is dropped. `_busy` counts the
        # handlers past that check (wait() waits for them too); `_local.handling` marks a
        # thread inside one (a listener called there that stops the monitor).
        self._closed = False
        self._busy = 0
        self._local = threading.local()

    @property
    def topic(self) -> str:
        """The control topic: a message's signed ``dest`` must be this."""
        return self._topic

    def stats(self) -> dict[str, dict[str, int]]:
        """``accepted`` messages by op, ``refused`` ones by reason."""
        with self._lock:
            return {"accepted": dict(self._accepted), "refused": dict(self._refused)}

    def handle(self, message: Message) -> None:
        """Take one message from the control topic (the subscription's handler). Raises
        nothing: every message is accepted or counted as refused, unless the receiver is
        closed (:meth:`close`): then it is dropped, neither applied nor counted (the
        subscription was cancelled: as one sent after it)."""
        with self._lock:
            if self._closed:
                log.debug("control message on %r after the monitor stopped: dropped", self._topic)
                return
            self._busy += 1
        self._local.handling = True
        try:
            self._take(message.body, time.time())
        except ControlError as exc:
            self._refuse(exc, message.destination)
        except Exception as exc:  # a bug: counted, logged whole, reported
            self._fail(exc, message.destination)
        finally:
            self._local.handling = False
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def close(self) -> None:
        """Take no more messages (the monitor's stop(), once the subscription is cancelled:
        a handler that runs on after it applies nothing). Those already past the check, and
        the unsilences handed over, still run: :meth:`wait` waits for them."""
        with self._lock:
            self._closed = True

    def open(self) -> None:
        """Take messages again (the monitor's start(), before it subscribes)."""
        with self._lock:
            self._closed = False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the unsilences handed to the worker so far are applied, and the
        handlers in progress have returned; False if ``timeout`` (seconds) ran out first.
        Called from the worker, True at once; from a handler (a listener it reports to),
        waits for the others and the worker, which never wait for a handler."""
        if threading.current_thread() is self._worker:
            return True
        own = 1 if getattr(self._local, "handling", False) else 0
        with self._idle:
            return self._idle.wait_for(lambda: not self._working and self._busy <= own, timeout)

    def _fail(self, exc: BaseException, destination: str) -> None:
        with self._lock:
            n = self._refused["failed"] = self._refused.get("failed", 0) + 1
        error = ControlError(
            "failed", f"control message on {destination!r:.80}: {type(exc).__name__}: {exc}"[:400]
        )
        if worth_logging(n):
            log.error("applying %s [failed %d]", error.detail, n, exc_info=exc)
        self._report(error)

    def _refuse(self, exc: ControlError, destination: str) -> None:
        with self._lock:
            n = self._refused[exc.reason] = self._refused.get(exc.reason, 0) + 1
        error = ControlError(exc.reason, f"control message on {destination!r:.80}: {exc.detail}")
        if worth_logging(n):
            log.warning("refused %s [%s %d]", error.detail, exc.reason, n)
        self._report(error)

    def _take(self, body: bytes, now: float) -> None:
        msg = ControlMessage.decode(body, self._codec)
        if msg.dest != self._topic:
            raise ControlError(
                "wrong_destination",
                f"{msg.op} {msg.id!r} was sent to {msg.dest!r:.80}, not to this monitor's "
                f"control topic",
            )
        max_age = self._max_age()
        if abs(now - msg.sent) > max_age:
            raise ControlError(
                "stale",
                f"sent {now - msg.sent:+.1f} s from this host's clock, bound {max_age:g} s",
            )
        with self._lock:
            if msg.nonce in self._nonces:
                raise ControlError("replayed", f"nonce of {msg.op} {msg.id!r} taken already")
            if msg.op == "silence" and msg.id in self._ids:
                raise ControlError("replayed", f"silence {msg.id!r} made already")
            target = self._ids.get(msg.id) if msg.op == "unsilence" else None
            if msg.op == "unsilence" and target is None:
                raise ControlError("unknown_silence", f"no silence {msg.id!r} made here")
            self._nonces[msg.nonce] = msg.sent
            if msg.op == "silence":
                self._ids[msg.id] = None  # a second copy meanwhile is a replay
            self._prune(now, max_age)
        if msg.op == "unsilence":
            assert target is not None
            self._hand_over(target[0])
            return
        # Out of the lock, on this thread: registering a silence emits no event, so never
        # waits for room in a queue (nor on another thread).
        assert msg.pattern is not None and msg.until is not None
        try:
            until = _dt.datetime.fromtimestamp(msg.until, tz=_dt.timezone.utc)
            sid = self._silence(msg.pattern, until, msg.reason)
        except BaseException as exc:
            with self._lock:
                self._ids.pop(msg.id, None)  # not made: the id is free again
            if isinstance(exc, ControlError):
                raise
            if isinstance(exc, (ValueError, OverflowError)):  # a time this monitor cannot hold
                raise ControlError("malformed", f"silence {msg.id!r}: {exc}"[:300]) from None
            raise
        with self._lock:
            self._ids[msg.id] = (sid, msg.until)
            self._accepted["silence"] = self._accepted.get("silence", 0) + 1

    def _hand_over(self, sid: int) -> None:
        """Queue an unsilence for the worker, starting one if none runs."""
        with self._lock:
            self._queue.append(sid)
            if self._working:
                return
            self._working = True
        try:
            worker = threading.Thread(target=self._work, name=_WORKER, daemon=True)
            self._worker = worker  # one at a time: set before it runs, read by wait()
            worker.start()
        except BaseException:
            with self._idle:
                # Not applied (counted as failed by handle): out of the queue, or the next
                # worker would apply it and count it as accepted too. The queue held only
                # this one: a worker ends only once it is empty, and none ran.
                self._queue.clear()
                self._working = False
                self._idle.notify_all()
            raise

    def _work(self) -> None:
        """The worker: applies the unsilences queued, then ends (a later one starts another)."""
        while True:
            with self._idle:
                if not self._queue:
                    # Under the lock that _hand_over queues under: one queued after this
                    # starts a new worker, as it sees _working False.
                    self._working = False
                    self._idle.notify_all()
                    return
                sid = self._queue.popleft()
            try:
                self._unsilence(sid)
            except Exception as exc:
                self._fail(exc, self._topic)
                continue
            with self._lock:
                self._accepted["unsilence"] = self._accepted.get("unsilence", 0) + 1

    def _prune(self, now: float, max_age: float) -> None:
        """Let go of what can no longer matter (under the lock): nonces older than the age
        bound (refused as stale anyway) and ids of silences over for longer than it (an hour
        with no bound); then, past :data:`MAX_REMEMBERED`, the oldest nonces and the oldest
        ids of silences over (never one in force, nor one being applied)."""
        if len(self._nonces) + len(self._ids) >= self._prune_at:
            keep = max_age if math.isfinite(max_age) else 3600.0
            for nonce in [n for n, sent in self._nonces.items() if now - sent > max_age]:
                del self._nonces[nonce]
            for sid in [i for i, v in self._ids.items() if v is not None and now - v[1] > keep]:
                del self._ids[sid]
            self._prune_at = max(1024, 2 * (len(self._nonces) + len(self._ids)))
        while len(self._nonces) > MAX_REMEMBERED:
            self._nonces.popitem(last=False)
        excess = len(self._ids) - MAX_REMEMBERED
        if excess > 0:
            over = [i for i, v in self._ids.items() if v is not None and v[1] <= now]
            for sid in over[:excess]:
                del self._ids[sid]


_WORKER = "heartwire-control"
