"""Monitor groups: several monitors sharing a fleet, standbys taking over (issue 18; the design
and the broker facts it rests on: ``docs/groups-design.md``).

Built so far:

- the shards on the wire. A group splits its topics over ``shards`` shards by a hash every
  process and language computes alike (:func:`shard_of`); a publisher given the group's
  :class:`ShardLayout` (``HeartbeatPublisher(..., shards=layout)``) sends each beat where the
  group consumes its shard: the shard's queue ``heartwire.<group>.<k>`` on ActiveMQ (a fixed
  number of broker destinations, not one per topic), the topic itself with a
  ``heartwire-shard`` header on RabbitMQ. See ``docs/shards.md``.
- a shard's state snapshot (:class:`ShardSnapshot`, :func:`encode_snapshot`,
  :func:`decode_snapshot`): what a member taking the shard over carries on from (the topics the
  old owner knew, the FAILED ones with their outage), signed as beats are when the group has a
  key (``docs/groups-design.md`` §3).
  :func:`publish_snapshot` and :func:`read_snapshot` carry it through the shard's state queue.
- the RabbitMQ objects a group needs (RabbitMQ's STOMP plugin cannot declare them):
  :func:`rabbitmq_definitions` (for a definitions file or ``rabbitmqctl import_definitions``)
  and :func:`declare_rabbitmq` (over AMQP 0-9-1 with pika: ``pip install
  'heartwire[groups]'``). ActiveMQ needs nothing: its queues are made on first use.
- the member (:class:`MonitorGroupMember`): a monitor fed from every shard queue, owning the
  shards the broker delivers to it, taking shards over with their snapshot, releasing shards
  for balance; :func:`group_status` reads the members' status messages (``docs/groups.md``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from heartwire import _core, _validate
from heartwire.beat import MAX_REASON_LEN, BeatCodec, DecodeError
from heartwire.control import RESERVED_PREFIX
from heartwire.transport.dialect import RABBITMQ, Dialect, named
from heartwire.transport.patterns import validate_pattern, validate_topic
from heartwire.transport.shards import (
    DEFAULT_SHARDS,
    MAX_SHARDS,
    SHARD_HEADER,
    ShardLayout,
    jump_hash,
    shard_of,
)
from heartwire.transport.urls import MAX_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from heartwire.monitor import HeartbeatMonitor
    from heartwire.transport.stomp import StompTransport

__all__ = [
    "DEFAULT_BEAT_TTL",
    "DEFAULT_MAX_BEATS",
    "DEFAULT_SHARDS",
    "DEFAULT_SNAPSHOT_TTL",
    "MAX_MEMBERS",
    "MAX_SHARDS",
    "MAX_SNAPSHOT_BYTES",
    "MEMBER_AGE_PERIODS",
    "SHARD_HEADER",
    "SNAPSHOT_REASONS",
    "SNAPSHOT_VERSION",
    "STATE_NAMES",
    "STATUS_AGE_SKEW",
    "STATUS_PREFIX",
    "STATUS_REASONS",
    "TICK_HEADER",
    "GroupStatus",
    "MemberStatus",
    "MonitorGroupMember",
    "ShardLayout",
    "ShardSnapshot",
    "SnapshotError",
    "TopicRecord",
    "declare_rabbitmq",
    "decode_snapshot",
    "encode_snapshot",
    "exchange_name",
    "group_status",
    "jump_hash",
    "publish_snapshot",
    "rabbitmq_definitions",
    "read_snapshot",
    "shard_destination",
    "shard_of",
    "snapshot_of",
    "state_destination",
    "state_queue",
    "status_topic",
]

_log = logging.getLogger(__name__)

#: A member counts another as alive for this many of the other's periods after its last status,
#: and refuses a status whose ``sent`` is older than that many of its sender's periods plus
#: :data:`STATUS_AGE_SKEW` (as the monitor refuses a stale beat).
MEMBER_AGE_PERIODS = 3
#: The clock skew allowed between the members' hosts when a status's ``sent`` is checked
#: (seconds; the monitor's ``BEAT_AGE_SKEW``).
STATUS_AGE_SKEW: float = _core.BEAT_AGE_SKEW
#: The most members a member keeps statuses of (a new name beyond it is refused, ``too_many``).
MAX_MEMBERS = 1024
#: Why a member refused a status message (:attr:`MonitorGroupMember.statuses_refused`): the
#: snapshot reasons for a message that does not decode, plus these.
STATUS_REASONS = ("stale", "replayed", "left", "same_name", "too_many")
#: A member logs a failing step of its worker (ticks, snapshots, status, ...) at most this often
#: (seconds); every failure is counted (:attr:`MonitorGroupMember.failures`).
FAILURE_LOG_EVERY = 10.0
_INCARNATION = re.compile(r"[0-9A-Za-z_-]{1,64}")

#: How long a shard queue keeps an unconsumed beat by default (seconds): an old beat is worth
#: nothing once a newer one of its topic can have come.
DEFAULT_BEAT_TTL = 60.0
#: How many beats a shard queue holds at most by default (the oldest are dropped beyond it).
DEFAULT_MAX_BEATS = 1_000_000
#: The longest queue TTL and expiry RabbitMQ takes (ten years, in ms: its own cap; beyond it a
#: declaration is refused with ``value_too_large``).
_RABBITMQ_MAX_MS = 315_360_000_000
#: The largest count an AMQP 0-9-1 table holds (a signed 64-bit integer).
_AMQP_MAX_INT = 2**63 - 1


def exchange_name(layout: ShardLayout) -> str:
    """The group's headers exchange on RabbitMQ: ``heartwire.<group>``."""
    return f"heartwire.{layout.group}"


def state_queue(layout: ShardLayout, shard: int) -> str:
    """The queue keeping the newest state snapshot of ``shard``: ``heartwire.<group>.<k>.state``."""
    return layout.queue(shard) + ".state"


def _milliseconds(value: object, field: str) -> int:
    """``value`` seconds as the whole milliseconds RabbitMQ takes: at least 1 ms (0 means
    "expire at once" for a TTL and is refused for an expiry), at most RabbitMQ's ten years."""
    seconds = _validate.seconds(value, field)
    ms = round(seconds * 1000) if seconds <= _RABBITMQ_MAX_MS / 1000 else _RABBITMQ_MAX_MS + 1
    if not 1 <= ms <= _RABBITMQ_MAX_MS:
        raise ValueError(
            f"{field} must be between 0.001 and {_RABBITMQ_MAX_MS // 1000} seconds (RabbitMQ "
            f"counts whole milliseconds, up to ten years), got {value!r}"
        )
    return ms


def _shard_queue_arguments(
    beat_ttl_ms: int, max_beats: int, expires_ms: int | None
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "x-single-active-consumer": True,
        "x-message-ttl": beat_ttl_ms,
        "x-max-length": max_beats,
        "x-overflow": "drop-head",
    }
    if expires_ms is not None:
        args["x-expires"] = expires_ms
    return args


def _state_queue_arguments(expires_ms: int | None) -> dict[str, Any]:
    # x-max-length 1 (drop-head): the newest snapshot only. The same arguments as the members'
    # STOMP SEND/SUBSCRIBE headers, or RabbitMQ refuses the declaration as inequivalent.
    args: dict[str, Any] = {"x-max-length": 1}
    if expires_ms is not None:
        args["x-expires"] = expires_ms
    return args


def rabbitmq_definitions(
    layout: ShardLayout,
    pattern: str,
    *,
    vhost: str = "/",
    beat_ttl: float = DEFAULT_BEAT_TTL,
    max_beats: int = DEFAULT_MAX_BEATS,
    expires: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The RabbitMQ objects of the group ``layout`` watching ``pattern`` (API syntax, e.g.
    ``"svc.>"``), as the ``exchanges``, ``queues`` and ``bindings`` of a definitions file
    (``json.dump`` it; ``load_definitions`` in ``rabbitmq.conf`` or ``rabbitmqctl
    import_definitions`` loads it):

    - the headers exchange ``heartwire.<group>``, bound to ``amq.topic`` with ``pattern``;
    - per shard ``k``: the durable queue ``heartwire.<group>.<k>`` with single active consumer,
      a message TTL of ``beat_ttl`` seconds and at most ``max_beats`` beats (oldest dropped),
      bound with ``x-match: all, heartwire-shard: "<k>"``; and its state queue
      ``heartwire.<group>.<k>.state`` (``x-max-length: 1``).

    ``expires`` (seconds, None: never) deletes a queue left unused that long (tests, trials).
    RabbitMQ counts ``beat_ttl`` and ``expires`` in whole milliseconds: each must be between
    1 ms and ten years (its cap), and ``max_beats`` at most 2**63 - 1 (an AMQP integer).
    Bad arguments raise :class:`ValueError` / :class:`TypeError` naming them.
    """
    if not isinstance(layout, ShardLayout):
        raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
    validate_pattern(pattern)
    if not isinstance(vhost, str) or not vhost:
        raise ValueError(f"vhost must be a non-empty str, got {vhost!r}")
    beat_ttl_ms = _milliseconds(beat_ttl, "beat_ttl")
    if (
        isinstance(max_beats, bool)
        or not isinstance(max_beats, int)
        or not 1 <= max_beats <= _AMQP_MAX_INT
    ):
        raise ValueError(f"max_beats must be an int in [1, 2**63 - 1], got {max_beats!r:.60}")
    expires_ms = None if expires is None else _milliseconds(expires, "expires")
    exchange = exchange_name(layout)
    # RabbitMQ's own wildcards for the pattern ('svc.>' -> 'svc.#'); its '#' also matches zero
    # words, which the members' pattern check filters out, as for any RabbitMQ subscription.
    key = RABBITMQ.subscription(pattern).removeprefix("/topic/")
    queues: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = [
        {
            "source": "amq.topic",
            "vhost": vhost,
            "destination": exchange,
            "destination_type": "exchange",
            "routing_key": key,
            "arguments": {},
        }
    ]
    for shard in range(layout.shards):
        queues.append(
            {
                "name": layout.queue(shard),
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": _shard_queue_arguments(beat_ttl_ms, max_beats, expires_ms),
            }
        )
        queues.append(
            {
                "name": state_queue(layout, shard),
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": _state_queue_arguments(expires_ms),
            }
        )
        bindings.append(
            {
                "source": exchange,
                "vhost": vhost,
                "destination": layout.queue(shard),
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {"x-match": "all", SHARD_HEADER: str(shard)},
            }
        )
    exchanges = [
        {
            "name": exchange,
            "vhost": vhost,
            "type": "headers",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    ]
    return {"exchanges": exchanges, "queues": queues, "bindings": bindings}


def declare_rabbitmq(
    layout: ShardLayout,
    pattern: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5672,
    login: str = "guest",
    passcode: str = "guest",
    vhost: str = "/",
    timeout: float = 10.0,
    beat_ttl: float = DEFAULT_BEAT_TTL,
    max_beats: int = DEFAULT_MAX_BEATS,
    expires: float | None = None,
) -> None:
    """Declare :func:`rabbitmq_definitions`' objects on a RabbitMQ broker over AMQP 0-9-1
    (pika; ``pip install 'heartwire[groups]'``), waiting at most ``timeout`` seconds for each
    step. Idempotent: every member may call it at start. Raises pika's errors as they come (a
    queue that exists with other arguments: ``PRECONDITION_FAILED``, naming the argument)."""
    defs = rabbitmq_definitions(
        layout, pattern, vhost=vhost, beat_ttl=beat_ttl, max_beats=max_beats, expires=expires
    )
    timeout = _validate.seconds(timeout, "timeout")
    import pika  # the optional dependency, only here

    params = pika.ConnectionParameters(
        host=host,
        port=port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(login, passcode),
        socket_timeout=timeout,
        blocked_connection_timeout=timeout,
        connection_attempts=1,
    )
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        for x in defs["exchanges"]:
            ch.exchange_declare(
                x["name"], x["type"], durable=x["durable"], auto_delete=x["auto_delete"]
            )
        for q in defs["queues"]:
            ch.queue_declare(
                q["name"],
                durable=q["durable"],
                auto_delete=q["auto_delete"],
                arguments=q["arguments"],
            )
        for b in defs["bindings"]:
            if b["destination_type"] == "exchange":
                ch.exchange_bind(b["destination"], b["source"], routing_key=b["routing_key"])
            else:
                ch.queue_bind(
                    b["destination"],
                    b["source"],
                    routing_key=b["routing_key"],
                    arguments=b["arguments"],
                )
    finally:
        conn.close()


# -- a shard's state snapshot -------------------------------------------------------------------

#: The snapshot format's version (the ``hwshard`` field).
SNAPSHOT_VERSION = 1
#: The largest snapshot accepted, in bytes (a shard of 100 000 topics fits).
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024
#: How long a published snapshot lives by default (seconds), and how old a snapshot read may be
#: (either way: the hosts' clocks may differ): a member publishes on change and every period, so
#: a live owner's newest is always younger; an older one is a dead owner's or a replay.
DEFAULT_SNAPSHOT_TTL = 600.0
#: Every :attr:`SnapshotError.reason`.
SNAPSHOT_REASONS = frozenset(
    {
        "too_large",  # longer than max_size bytes
        "not_utf8",
        "bad_json",  # not a JSON object
        "unsigned",  # the group has a key, the snapshot no signature
        "bad_signature",
        "malformed",  # a field missing, of the wrong type or out of range (the detail names it)
        "other_group",  # another group, another shard count, or a shard that is not the one read
        "stale",  # sent longer ago (or further ahead) than max_age: a dead owner's, or a replay
    }
)
_MAX_MISSED = 2**32 - 1  # the core counts missed periods in 32 bits
_MAX_MEMBER_LEN = 128


class SnapshotError(ValueError):
    """A state snapshot refused; ``reason`` is one of :data:`SNAPSHOT_REASONS`, ``detail`` says
    what exactly (never the key or the signature)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.detail))


@dataclass(frozen=True)
class TopicRecord:
    """One topic of a shard as its owner knows it: ``failed_since`` is when its outage began as
    Unix seconds (None: not FAILED), ``missed`` the periods counted missed, ``reason`` an
    explicit failure's reason, ``period`` the period it is watched with (None: the monitor's).

    The marks say what the owner's listeners were told (``HeartbeatMonitor.adopt`` carries
    them on): ``alerted`` an unmarked ``Failed`` of the outage went out (else only ones marked
    ``silenced`` and/or ``suppressed_by`` that parent, or none while it flapped), ``flapping``
    the topic flaps. ``paused``: the topic was paused by name (``monitor.pause(topic)``); a
    member taking it over adopts it, then pauses it."""

    topic: str
    failed_since: float | None = None
    missed: int = 0
    reason: str | None = None
    period: float | None = None
    alerted: bool = True
    silenced: bool = False
    suppressed_by: str | None = None
    flapping: bool = False
    paused: bool = False

    @property
    def plain_marks(self) -> bool:
        """The default marks (an alerted outage or none, not flapping): not encoded."""
        quiet = self.silenced or self.suppressed_by is not None
        return self.alerted and not quiet and not self.flapping


@dataclass(frozen=True)
class ShardSnapshot:
    """The state of shard ``shard`` of a group's ``layout`` as member ``member`` saw it at
    ``sent`` (Unix seconds); ``seq`` counts the member's snapshots of the shard."""

    layout: ShardLayout
    shard: int
    member: str
    seq: int
    sent: float
    topics: tuple[TopicRecord, ...] = ()

    @property
    def failed(self) -> tuple[TopicRecord, ...]:
        """The topics FAILED in this snapshot."""
        return tuple(t for t in self.topics if t.failed_since is not None)


def _is_int(value: object, n: int) -> bool:
    """Whether ``value`` is the int ``n`` (JSON ``true`` is no 1 here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value == n


def _finite(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SnapshotError("malformed", f"{field} must be a finite number, got {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:  # a JSON integer beyond a float's range
        number = math.inf
    if not math.isfinite(number):
        raise SnapshotError("malformed", f"{field} must be a finite number, got {value!r:.60}")
    return number


def _period(value: object, field: str) -> float:
    """A topic's period: one the core can watch (as a beat's, ``bad_period`` there)."""
    period = _finite(value, field)
    if not _core.MIN_BEAT_PERIOD <= period <= _core.MAX_BEAT_PERIOD:
        raise SnapshotError(
            "malformed",
            f"{field} must be between {_core.MIN_BEAT_PERIOD} and {_core.MAX_BEAT_PERIOD:g} "
            f"seconds, got {period!r}",
        )
    return period


def _count(value: object, field: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise SnapshotError("malformed", f"{field} must be an int in [0, {top}], got {value!r:.60}")
    return value


# A member's name: what a snapshot, a status and ``heartwire status --group`` carry and print
# (no spaces, newlines or terminal escapes to forge a line with).
_MEMBER_NAME = re.compile(rf"[A-Za-z0-9_\-:.]{{1,{_MAX_MEMBER_LEN}}}", re.ASCII)


def _member(value: object, field: str) -> str:
    """A member's name: 1 to 128 ASCII letters, digits and ``_-:.`` (:class:`SnapshotError`,
    a ValueError, naming ``field`` otherwise)."""
    if not isinstance(value, str) or not _MEMBER_NAME.fullmatch(value):
        raise SnapshotError(
            "malformed",
            f"{field} must be 1 to {_MAX_MEMBER_LEN} ASCII letters, digits or _-:., "
            f"got {value!r:.60}",
        )
    return value


def _record(row: object, i: int, layout: ShardLayout, shard: int) -> TopicRecord:
    where = f"topics[{i}]"
    if not isinstance(row, list) or len(row) < 5:
        raise SnapshotError(
            "malformed", f"{where} must be [topic, failed_since, missed, reason, period]"
        )
    topic, since, missed, reason, period = row[:5]  # later elements: newer fields, ignored
    alerted, silenced, parent, flapping = _marks(row[5] if len(row) > 5 else None, where)
    # The 7th element, after the marks (or null): paused if true (anything else, as an element a
    # later version may put there for another use, is not).
    paused = len(row) > 6 and row[6] is True
    try:
        in_shard = layout.shard_of(topic)
    except (TypeError, ValueError) as exc:
        raise SnapshotError("malformed", f"{where}: {exc}") from None
    if topic.startswith(RESERVED_PREFIX):  # heartwire's own: never watched as a topic
        raise SnapshotError(
            "malformed", f"{where}: {topic!r:.130} is under {RESERVED_PREFIX!r}, never a beat"
        )
    if in_shard != shard:
        raise SnapshotError("malformed", f"{where}: {topic!r} is in shard {in_shard}, not {shard}")
    if reason is not None and (not isinstance(reason, str) or not reason):
        raise SnapshotError("malformed", f"{where}: the reason must be a non-empty str or null")
    if isinstance(reason, str) and len(reason) > MAX_REASON_LEN:
        raise SnapshotError("malformed", f"{where}: the reason is longer than {MAX_REASON_LEN}")
    return TopicRecord(
        topic,
        None if since is None else _finite(since, f"{where} failed_since"),
        _count(missed, f"{where} missed", _MAX_MISSED),
        reason,
        None if period is None else _period(period, f"{where} period"),
        alerted,
        silenced,
        parent,
        flapping,
        paused,
    )


def _marks(value: object, where: str) -> tuple[bool, bool, str | None, bool]:
    """A row's marks, ``[alerted, silenced, suppressed_by, flapping]`` (absent: the default)."""
    if value is None:
        return True, False, None, False
    if (
        not isinstance(value, list)
        or len(value) != 4
        or not all(isinstance(value[i], bool) for i in (0, 1, 3))
    ):
        raise SnapshotError(
            "malformed", f"{where} marks must be [alerted, silenced, suppressed_by, flapping]"
        )
    parent = value[2]
    if parent is not None:
        try:
            validate_topic(parent, "suppressed_by")
        except (TypeError, ValueError):
            raise SnapshotError(
                "malformed", f"{where} suppressed_by must be a topic name or null"
            ) from None
    return value[0], value[1], parent, value[3]


def _records(rows: list[Any], layout: ShardLayout, shard: int) -> tuple[TopicRecord, ...]:
    """The rows checked one by one, and each topic listed once (two rows of one topic would
    leave the state a new owner adopts to its loop order)."""
    records = tuple(_record(row, i, layout, shard) for i, row in enumerate(rows))
    seen: set[str] = set()
    for i, record in enumerate(records):
        if record.topic in seen:
            raise SnapshotError("malformed", f"topics[{i}]: {record.topic!r} is listed twice")
        seen.add(record.topic)
    return records


def _check_shard(layout: object, shard: object) -> None:
    if not isinstance(layout, ShardLayout):
        raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
    layout.queue(shard)  # type: ignore[arg-type]  # the shard's range (ValueError naming it)


def encode_snapshot(snapshot: ShardSnapshot, key: bytes | str | None = None) -> bytes:
    """The bytes of ``snapshot``: one compact JSON object, signed with the group's ``key`` as
    beats are (``sig``: HMAC-SHA256 of the canonical JSON of the other fields)::

        {"hwshard":1,"group":"payments","shards":16,"shard":3,"member":"m1","seq":7,
         "sent":1764000000.0,"topics":[["svc.db",1763999990.0,2,null,1.0],
         ["svc.api",null,0,null,null]],"sig":"<hex>"}

    A topic row is ``[topic, failed_since, missed, reason, period]``, followed by its marks
    ``[alerted, silenced, suppressed_by, flapping]`` unless they are the default (alerted or
    up, not flapping: :attr:`TopicRecord.plain_marks`), then ``true`` for a topic paused by
    name (its marks ``null`` if default; decoders before ``paused`` ignore the element).
    Raises
    :class:`SnapshotError` (``malformed``) naming a field that would not decode."""
    if not isinstance(snapshot, ShardSnapshot):
        raise TypeError(f"snapshot must be a ShardSnapshot, got {type(snapshot).__name__}")
    layout = snapshot.layout
    layout.queue(snapshot.shard)  # the shard's range, checked (ValueError naming it)
    rows = []
    for t in snapshot.topics:
        row: list[Any] = [t.topic, t.failed_since, t.missed, t.reason, t.period]
        if not t.plain_marks or t.paused:
            row.append(
                None if t.plain_marks else [t.alerted, t.silenced, t.suppressed_by, t.flapping]
            )
        if t.paused:
            row.append(True)
        rows.append(row)
    _records(rows, layout, snapshot.shard)  # what decode would refuse, refused here
    obj = {
        "hwshard": SNAPSHOT_VERSION,
        "group": layout.group,
        "shards": layout.shards,
        "shard": snapshot.shard,
        "member": _member(snapshot.member, "member"),
        "seq": _count(snapshot.seq, "seq", 2**63 - 1),
        "sent": _finite(snapshot.sent, "sent"),
        "topics": rows,
    }
    return BeatCodec(key).seal(obj)


def decode_snapshot(
    body: bytes | bytearray | memoryview,
    layout: ShardLayout,
    shard: int,
    key: bytes | str | None = None,
    *,
    max_size: int = MAX_SNAPSHOT_BYTES,
    max_age: float | None = DEFAULT_SNAPSHOT_TTL,
    now: float | None = None,
) -> ShardSnapshot:
    """The snapshot of ``shard`` of the group ``layout`` in ``body``, checked: its signature
    when the group has a ``key``, every field, each topic in that shard (a valid name, not one
    of heartwire's own, listed once, its period one the core can watch), and its age: ``sent``
    within ``max_age`` seconds of the wall clock ``now`` (default ``time.time()``) either way
    (``stale``, checked last; None: no bound). Raises :class:`SnapshotError` (reason from
    :data:`SNAPSHOT_REASONS`) and nothing else for any bytes; bad arguments (a shard outside
    the layout, ``max_size`` < 1, ``max_age`` <= 0) raise :class:`ValueError` /
    :class:`TypeError` naming them."""
    _check_shard(layout, shard)
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
        raise ValueError(f"max_size must be an int >= 1, got {max_size!r:.60}")
    max_age = _validate.seconds(max_age, "max_age", allow_none=True, allow_inf=True)
    if now is not None:
        now = _validate.seconds(now, "now", allow_zero=True)
    size = memoryview(body).nbytes  # bytes, whatever the item size of a memoryview
    if size > max_size:
        raise SnapshotError("too_large", f"{size} bytes, more than {max_size}")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError("not_utf8", str(exc)[:200]) from None
    try:
        obj = BeatCodec(key).unseal(text, "snapshot")
    except DecodeError as exc:
        raise SnapshotError(exc.reason, exc.detail) from None
    if not _is_int(obj.get("hwshard"), SNAPSHOT_VERSION):
        raise SnapshotError("malformed", f"'hwshard' must be {SNAPSHOT_VERSION}")
    if obj.get("group") != layout.group or not _is_int(obj.get("shards"), layout.shards):
        raise SnapshotError(
            "other_group",
            f"a snapshot of group {obj.get('group')!r:.80} with {obj.get('shards')!r:.20} shards,"
            f" not {layout.group!r} with {layout.shards}",
        )
    if not _is_int(obj.get("shard"), shard):
        raise SnapshotError(
            "other_group", f"a snapshot of shard {obj.get('shard')!r:.20}, not {shard}"
        )
    topics = obj.get("topics")
    if not isinstance(topics, list):
        raise SnapshotError("malformed", "'topics' must be a list")
    snapshot = ShardSnapshot(
        layout,
        shard,
        _member(obj.get("member"), "'member'"),
        _count(obj.get("seq"), "'seq'", 2**63 - 1),
        _finite(obj.get("sent"), "'sent'"),
        _records(topics, layout, shard),
    )
    if max_age is not None:
        age = (time.time() if now is None else now) - snapshot.sent
        if not abs(age) <= max_age:
            when = f"{age:.3f} s ago" if age >= 0 else f"{-age:.3f} s ahead"
            raise SnapshotError(
                "stale",
                f"sent {when} by {snapshot.member!r} (seq {snapshot.seq}), more than max_age "
                f"{max_age:g} s: a dead owner's old state, or a replay",
            )
    return snapshot


def snapshot_of(
    monitor: HeartbeatMonitor,
    layout: ShardLayout,
    shard: int,
    *,
    member: str,
    seq: int,
    sent: float | None = None,
) -> ShardSnapshot:
    """The snapshot of ``shard`` as ``monitor`` sees it now: every topic it watches in the
    shard (PENDING, ALIVE, FAILED or PAUSED), each FAILED one with the start of its outage as
    Unix seconds (``monitor.wall_time``), its missed periods and its period; a topic paused by
    name with ``paused`` set (one PAUSED only because the whole monitor is, without: a group's
    pause reaches every member). ``sent`` defaults to the wall clock now. Each topic's marks
    come from the monitor's detector (``Detector.marks``: what its listeners were told). (The
    outage's reason is not in the monitor's status yet: left out; nor the outage of a PAUSED
    topic: the status of a paused topic has no ``failed_since``.) One pass over the
    monitor's topics, a shard hash each."""
    layout.queue(shard)  # the shard's range, checked
    rows = _shard_records(monitor, layout, {shard}, marks=True)[shard]
    when = time.time() if sent is None else sent
    return ShardSnapshot(layout, shard, member, seq, when, tuple(rows))


def _shard_records(
    monitor: HeartbeatMonitor, layout: ShardLayout, shards: set[int], *, marks: bool
) -> dict[int, list[TopicRecord]]:
    """The records of the topics ``monitor`` watches in each of ``shards`` (see
    :func:`snapshot_of`; ``marks``: with the detector's marks, else the defaults)."""
    by_shard: dict[int, list[TopicRecord]] = {k: [] for k in shards}
    if not by_shard:
        return by_shard
    marked = {m[0]: m[1:] for m in monitor.detector.marks()} if marks else {}
    # Paused by name: kept across a whole-monitor pause and resume, so written as paused. A
    # topic PAUSED only by the monitor's own pause is written unpaused (the pause is the
    # group's: every member got it).
    by_name = set(monitor._intake.paused_names())
    for st in monitor.statuses():
        if st.state not in ("PENDING", "ALIVE", "FAILED", "PAUSED"):
            continue
        rows = by_shard.get(layout.shard_of(st.topic))
        if rows is None:
            continue
        since = st.failed_since if st.state == "FAILED" else None
        alerted, silenced, parent, flapping = marked.get(st.topic, (True, False, None, False))
        rows.append(
            TopicRecord(
                st.topic,
                None if since is None else monitor.wall_time(since),
                0 if since is None else st.missed,
                None,
                st.period,
                alerted or since is None,
                silenced and since is not None,
                parent if since is not None else None,
                flapping,
                st.state == "PAUSED" and st.topic in by_name,
            )
        )
    return by_shard


# -- the state queue ----------------------------------------------------------------------------


def state_destination(layout: ShardLayout, shard: int, dialect: Dialect | str | None) -> str:
    """The STOMP destination of ``shard``'s state queue on a broker of ``dialect``: RabbitMQ's
    ``/amq/queue/heartwire.<group>.<k>.state`` (the queue :func:`declare_rabbitmq` made, used as
    is: ``/queue/`` would declare it again), ``/queue/heartwire.<group>.<k>.state`` elsewhere."""
    if isinstance(dialect, str):
        dialect = named(dialect)
    name = state_queue(layout, shard)
    return f"/amq/queue/{name}" if dialect is RABBITMQ else f"/queue/{name}"


def publish_snapshot(
    transport: StompTransport,
    snapshot: ShardSnapshot,
    key: bytes | str | None = None,
    *,
    ttl: float | None = DEFAULT_SNAPSHOT_TTL,
    timeout: float | None = None,
) -> str:
    """Send ``snapshot`` (:func:`encode_snapshot`, signed with ``key``) to its shard's state
    queue; returns the message id. ``ttl``: seconds until the broker drops it (the ``expires``
    header; RabbitMQ's ``expiration``): ActiveMQ's state queue keeps every snapshot
    until one is read, so a member publishing every period needs it (give a few periods);
    RabbitMQ's keeps only the newest. None: kept until read. On RabbitMQ the queue must exist
    (:func:`declare_rabbitmq`), or the snapshot is dropped. Waits and raises as
    ``StompTransport.send_to``."""
    body = encode_snapshot(snapshot, key)
    headers: dict[str, str] = {}
    if ttl is not None:
        ttl = _validate.seconds(ttl, "ttl")
        # Epoch ms; on RabbitMQ the transport adds ``expiration`` (the TTL it honours).
        headers["expires"] = str(int(time.time() * 1000) + max(1, round(ttl * 1000)))
    where = functools.partial(state_destination, snapshot.layout, snapshot.shard)
    return transport.send_to(where, body, headers, timeout=timeout)


def read_snapshot(
    transport: StompTransport,
    layout: ShardLayout,
    shard: int,
    key: bytes | str | None = None,
    *,
    wait: float = 1.0,
    quiet: float = 0.2,
    max_age: float | None = DEFAULT_SNAPSHOT_TTL,
) -> tuple[ShardSnapshot | None, list[SnapshotError]]:
    """Drain ``shard``'s state queue (at takeover) and return its newest valid snapshot (by
    ``sent``, then ``seq``), or None, with the snapshots refused (:func:`decode_snapshot`: one
    sent more than ``max_age`` seconds from now either way is ``stale``, so a replayed old
    snapshot cannot pass for the owner's state). Reading takes them off the queue: the caller
    publishes its own snapshot next. Each is decoded as it comes (only the best is kept).
    Waits up to ``wait`` seconds for the broker's receipt of the subscription, then up to
    ``wait`` seconds for a first snapshot and, once one came, until none came for ``quiet``
    seconds (a loaded broker may take a while to dispatch a queue to a new consumer; once it
    does, the rest follow at once).

    Raises ``RuntimeError`` when the transport has no connection (the broker's dialect picks
    the destination), and when the broker refuses the subscription or does not confirm it in
    ``wait`` seconds (naming the queue and the broker's ERROR): on RabbitMQ, a state queue
    never declared or gone with its ``expires`` (RabbitMQ also closes the connection then, so
    declare the group, :func:`declare_rabbitmq`, before reading). Never "no snapshot" for a
    queue it could not read.

    This read takes each snapshot off the queue as it comes (``ack:auto``): for a caller that
    publishes its own next or only looks. A group member taking a shard over reads with
    :class:`_HeldRead` instead, which keeps what it took unacknowledged until its own snapshot
    is out and gives it back if it loses the shard (stop, kill, connection lost) meanwhile."""
    _check_shard(layout, shard)
    wait = _validate.seconds(wait, "wait")
    quiet = _validate.seconds(quiet, "quiet")
    max_age = _validate.seconds(max_age, "max_age", allow_none=True, allow_inf=True)
    dialect = transport.dialect
    if dialect is None:
        raise RuntimeError(f"read_snapshot: {transport.url!r} has no broker connection")
    destination = state_destination(layout, shard, dialect)
    arrived: collections.deque[bytes] = collections.deque()
    lock = threading.Lock()
    last = [time.monotonic()]
    came = [0]  # snapshots delivered so far
    best: ShardSnapshot | None = None
    refused: list[SnapshotError] = []

    def take(_link: Any, message: Any) -> None:
        with lock:
            arrived.append(message.body)
            came[0] += 1
            last[0] = time.monotonic()

    def decode_arrived() -> None:
        nonlocal best
        while True:
            with lock:
                if not arrived:
                    return
                body = arrived.popleft()
            try:
                snap = decode_snapshot(body, layout, shard, key, max_age=max_age)
            except SnapshotError as exc:
                refused.append(exc)
                continue
            if best is None or (snap.sent, snap.seq) > (best.sent, best.seq):
                best = snap

    sub = transport.subscribe_destination(destination, take, confirm=wait)
    try:
        if not sub.confirmed:
            why = (
                f"the broker refused it: {sub.refused}"
                if sub.refused is not None
                else f"no receipt from the broker within {wait:g} s"
            )
            raise RuntimeError(
                f"read_snapshot: could not read the state queue {destination!r} of shard "
                f"{shard}: {why}"
            )
        start = time.monotonic()
        with lock:
            last[0] = start
        while True:
            decode_arrived()
            now = time.monotonic()
            with lock:
                since = now - last[0]
                got = came[0] > 0
            if (got and since >= quiet) or now - start >= wait:
                break
            time.sleep(min(quiet - since, 0.05) if got else 0.05)
    finally:
        sub.cancel()
    decode_arrived()  # what came before the cancel
    return best, refused


class _HeldRead:
    """A takeover's read of ``shard``'s state queue that holds what it took unacknowledged
    (``ack: client-individual``) until settled, so that a reader losing the shard mid-read
    (stopping, killed, its connection lost) does not take the old owner's state with it:

    - :meth:`settle` (the reader adopted the snapshot and keeps the shard): its own snapshot
      goes out and what it took is consumed. ActiveMQ: ours is sent, then each message taken
      ACKed, then UNSUBSCRIBE (anything delivered after the read, ours included, goes back to
      the queue). RabbitMQ (``Dialect.unsubscribe_keeps_unacked``): UNSUBSCRIBE first, then
      ours; what was taken stays unacknowledged with the connection (an ACK or NACK after
      the UNSUBSCRIBE is refused, and one before it would have the broker deliver ours, sent
      next, to this subscription, where it would be stuck the same way) until the connection
      closes, when the broker puts it back behind ours (the reader picks the newest by
      ``sent``): one message per takeover held by the broker for the connection's life.
    - :meth:`hand_back` (the shard lost, or the member stopping): ActiveMQ's UNSUBSCRIBE puts
      back what was not ACKed; on RabbitMQ the newest snapshot taken is sent back unchanged
      (the taken ones are stuck with the connection as above).
    - killed (kill -9): the connection closes and the broker redelivers what was taken.

    Not :func:`read_snapshot` with a parameter: the caller must settle or hand back, a
    protocol the public one-call read has no need of."""

    def __init__(
        self,
        transport: StompTransport,
        layout: ShardLayout,
        shard: int,
        key: bytes | str | None,
        *,
        ttl: float,
        max_age: float | None = DEFAULT_SNAPSHOT_TTL,
    ) -> None:
        dialect = transport.dialect
        if dialect is None:
            raise RuntimeError(f"read_snapshot: {transport.url!r} has no broker connection")
        d = named(dialect) if isinstance(dialect, str) else dialect
        self._transport = transport
        self._layout = layout
        self._shard = shard
        self._key = key
        self._ttl = ttl
        self._max_age = max_age
        self._keeps = d.unsubscribe_keeps_unacked
        self._destination = state_destination(layout, shard, d)
        self._lock = threading.Lock()
        self._arrived: collections.deque[tuple[Any, str, bytes]] = collections.deque()
        self._taken: list[tuple[Any, str]] = []  # (link, ack id): what the read took
        self._closed = False  # the read is over: later deliveries are not taken
        self._came = 0
        self._last = time.monotonic()
        self._sub: Any = None
        self.done = False  # settled or handed back
        self.best: ShardSnapshot | None = None
        self.best_body: bytes | None = None
        self.refused: list[SnapshotError] = []

    def _take(self, link: Any, message: Any) -> None:
        headers = message.headers or {}
        ack_id = headers.get("ack") or headers.get("message-id", "")
        body = message.body if isinstance(message.body, bytes) else bytes(message.body)
        with self._lock:
            if self._closed:
                return  # after the read: left unacknowledged, given back at the UNSUBSCRIBE
            self._arrived.append((link, ack_id, body))
            self._came += 1
            self._last = time.monotonic()

    def _decode_arrived(self) -> None:
        while True:
            with self._lock:
                if not self._arrived:
                    return
                link, ack_id, body = self._arrived.popleft()
                self._taken.append((link, ack_id))
            try:
                snap = decode_snapshot(
                    body, self._layout, self._shard, self._key, max_age=self._max_age
                )
            except SnapshotError as exc:
                self.refused.append(exc)
                continue
            if self.best is None or (snap.sent, snap.seq) > (self.best.sent, self.best.seq):
                self.best, self.best_body = snap, body

    def read(self, wait: float, quiet: float, stop: threading.Event | None = None) -> None:
        """As :func:`read_snapshot` (up to ``wait`` for the receipt, then for a first snapshot,
        then until ``quiet``), ending early once ``stop`` is set. Raises ``RuntimeError`` as
        it does (nothing taken then)."""
        headers = {} if self._keeps else {"activemq.prefetchSize": "100000"}  # all, not 1
        self._sub = self._transport.subscribe_destination(
            self._destination, self._take, ack="client-individual", headers=headers, confirm=wait
        )
        if not self._sub.confirmed:
            why = (
                f"the broker refused it: {self._sub.refused}"
                if self._sub.refused is not None
                else f"no receipt from the broker within {wait:g} s"
            )
            self._sub.cancel()
            self.done = True
            raise RuntimeError(
                f"read_snapshot: could not read the state queue {self._destination!r} of shard "
                f"{self._shard}: {why}"
            )
        start = time.monotonic()
        with self._lock:
            self._last = start
        while stop is None or not stop.is_set():
            self._decode_arrived()
            now = time.monotonic()
            with self._lock:
                since = now - self._last
                got = self._came > 0
            if (got and since >= quiet) or now - start >= wait:
                break
            time.sleep(min(quiet - since, 0.05) if got else 0.05)
        with self._lock:
            self._closed = True
        self._decode_arrived()  # what came before the read closed: taken too

    def settle(self, publish: Callable[[], bool]) -> bool:
        """Publish ours (``publish()``: whether it went out) and consume what was taken, in the
        order the broker needs (see the class); if ours did not go out, :meth:`hand_back`.
        Returns whether ours went out."""
        if self._keeps:
            self._cancel()
            sent = publish()
            if not sent:
                self._put_back()
            self.done = True
            return sent
        sent = publish()
        if sent:
            for link, ack_id in self._taken:
                try:
                    link.frame("ACK", {"id": ack_id})
                except ConnectionError:
                    break  # the connection is gone: the broker redelivers (ours is newer)
        self._cancel()  # not ACKed (all of it when ours did not go out): back to the queue
        self.done = True
        return sent

    def hand_back(self) -> None:
        """Give back what was taken (see the class); idempotent."""
        if self.done:
            return
        self.done = True
        self._cancel()
        if self._keeps:
            self._put_back()

    def _cancel(self) -> None:
        with self._lock:
            self._closed = True
        if self._sub is not None:
            self._sub.cancel()

    def _put_back(self) -> None:
        if self.best_body is None:
            return
        headers = {"expires": str(int(time.time() * 1000) + max(1, round(self._ttl * 1000)))}
        try:
            self._transport.send_to(self._destination, self.best_body, headers, timeout=1.0)
        except Exception as exc:  # the connection gone: the broker requeues what we took
            import logging

            logging.getLogger(__name__).warning(
                "shard %d: could not put its snapshot back: %r", self._shard, exc
            )


# -- the member -------------------------------------------------------------------------------

#: The SEND header that marks a member's ownership tick.
TICK_HEADER = "heartwire-tick"
#: The group status topic of ``group`` is ``_hw.group.<group>``: heartwire's own traffic, which a
#: monitor watching a wide pattern leaves alone (``docs/groups.md``).
STATUS_PREFIX = "_hw.group."
#: Seconds a member's snapshots live in the state queue unless told (shorter than
#: :data:`DEFAULT_SNAPSHOT_TTL`, the longest a reader takes: a member publishes every period).
MEMBER_SNAPSHOT_TTL = 60.0
#: The shortest life of a member's periodic snapshot (seconds): they live 3 periods, but at
#: least this, so that a hung member's last one outlives the broker's handover of its shards
#: (3 STOMP heart-beats of the member, or on ActiveMQ up to its write timeout: over 10 s was
#: seen with a SIGSTOPped member) and the next owner's read. Only the snapshot of a release or
#: a stop lives :data:`MEMBER_SNAPSHOT_TTL`. (ActiveMQ's state queue keeps every snapshot until
#: it expires: about ``ttl / period`` of them per shard, not 60 s worth.)
MEMBER_PERIODIC_TTL_MIN = 30.0
# The longest a worker's tick send waits (seconds): ticks go out every period, and one missed
# is harmless, while a worker held a period per shard would hold stop() up.
_WORKER_SEND_TIMEOUT = 0.5
# A tick's body: JSON whose first key is escaped ("\u0068wtick" is "hwtick"). The core's beat
# decoder cannot be sure what an escaped key spells and leaves the frame to Python (``Defer``,
# rust/ingest/beat.rs), so a tick reaches the member's handler, which learns from it that the
# broker delivers the shard to it, while every ordinary beat stays on the native path. (Checked by
# tests/monitor/test_group_member.py::test_a_tick_reaches_the_handler.)
_TICK_KEY = "hwtick"
_TICK_PREFIX = b'{"\\u0068wtick":1,'


def status_topic(group: str) -> str:
    """The topic where the members of ``group`` publish their status each period."""
    validate_topic(group, "group")
    return STATUS_PREFIX + group


def shard_destination(layout: ShardLayout, shard: int, dialect: Dialect | str | None) -> str:
    """The STOMP destination a member consumes ``shard`` from: RabbitMQ's
    ``/amq/queue/heartwire.<group>.<k>`` (the single-active-consumer queue
    :func:`declare_rabbitmq` made), ``/queue/heartwire.<group>.<k>`` elsewhere."""
    if isinstance(dialect, str):
        dialect = named(dialect)
    name = layout.queue(shard)
    return f"/amq/queue/{name}" if dialect is RABBITMQ else f"/queue/{name}"


def _subscribe_headers(dialect: Dialect | None) -> dict[str, str]:
    # ActiveMQ: an exclusive consumer (one member at a time gets the queue). RabbitMQ: the queue
    # itself is single-active-consumer (declared so); a SUBSCRIBE header would be ignored.
    return {"activemq.exclusive": "true"} if dialect is not RABBITMQ else {}


#: The state names a status may count (the core's); a count under any other name is dropped
#: at decoding and counted (:attr:`GroupStatus.unknown_states`).
STATE_NAMES = ("PENDING", "ALIVE", "FAILED", "PAUSED", "STOPPED", "REMOVED")


@dataclass(frozen=True)
class MemberStatus:
    """One member's status message: the shards it owns, its counts by state (of the topics it
    watches), its period, when it was sent (Unix seconds), the member's incarnation (an id
    drawn at each :meth:`MonitorGroupMember.start`: two members given one name tell each other
    apart by it; ``""`` from a member that sends none) and whether it is the last status of a
    member leaving the group (its :meth:`~MonitorGroupMember.stop`: the others drop it at once).

    ``shard_counts``: the counts by state of each shard it owns (a shard's topics are counted
    from its owner alone: :attr:`GroupStatus.counts`); None in the status of a member of a
    version without them."""

    member: str
    owned: tuple[int, ...]
    counts: dict[str, int]
    period: float
    sent: float
    incarnation: str = ""
    leaving: bool = False
    shard_counts: dict[int, dict[str, int]] | None = None


def _shard_counts(
    monitor: HeartbeatMonitor, layout: ShardLayout, owned: tuple[int, ...]
) -> dict[int, dict[str, int]]:
    """The counts by state of the topics ``monitor`` watches in each shard of ``owned``: one
    native pass over the topics and a native hash each (about 15 ms at 20 000 topics, once a
    period on the member's worker)."""
    out: dict[int, dict[str, int]] = {k: {} for k in owned}
    shards = layout.shards
    for st in monitor._det.statuses():
        counts = out.get(_core.shard_of(st.topic, shards))
        if counts is not None:
            counts[st.state] = counts.get(st.state, 0) + 1
    return out


def _encode_status(layout: ShardLayout, status: MemberStatus, codec: BeatCodec) -> bytes:
    obj: dict[str, Any] = {
        "hwgroup": 1,
        "group": layout.group,
        "shards": layout.shards,
        "member": status.member,
        "owned": list(status.owned),
        "counts": dict(status.counts),
        "period": status.period,
        "sent": status.sent,
        "incarnation": status.incarnation,
        "leaving": status.leaving,
    }
    if status.shard_counts is not None:  # (JSON object keys are strings)
        obj["shard_counts"] = {str(k): dict(v) for k, v in status.shard_counts.items()}
    return codec.seal(obj)


def _state_counts(value: object, field: str) -> tuple[dict[str, int], int]:
    """A status's counts by state: only :data:`STATE_NAMES` kept (a newer member's state name
    is not a reason to refuse its status; a name never reaches a terminal), and how many other
    names were dropped."""
    if not isinstance(value, dict):
        raise SnapshotError("malformed", f"{field} must be an object")
    kept: dict[str, int] = {}
    for k, v in value.items():
        if k in STATE_NAMES:
            kept[k] = _count(v, f"{field}[{k!r}]", 2**63 - 1)
    return kept, len(value) - len(kept)


def _decode_status_counted(
    body: bytes, layout: ShardLayout | str, codec: BeatCodec
) -> tuple[MemberStatus, int, int]:
    """:func:`_decode_status`, with the status's shard count and the number of count entries
    dropped (state names not in :data:`STATE_NAMES`)."""
    if len(body) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError("too_large", f"{len(body)} bytes")
    try:
        obj = codec.unseal(bytes(body).decode("utf-8"), "group status")
    except UnicodeDecodeError as exc:
        raise SnapshotError("not_utf8", str(exc)[:200]) from None
    except DecodeError as exc:
        raise SnapshotError(exc.reason, exc.detail) from None
    group = layout.group if isinstance(layout, ShardLayout) else layout
    if not _is_int(obj.get("hwgroup"), 1) or obj.get("group") != group:
        raise SnapshotError("other_group", f"not a status of group {group!r}")
    shards = obj.get("shards")
    if isinstance(layout, ShardLayout) and not _is_int(shards, layout.shards):
        raise SnapshotError("other_group", f"{shards!r:.20} shards, not {layout.shards}")
    top = _count(shards, "'shards'", MAX_SHARDS) - 1
    owned = obj.get("owned")
    if not isinstance(owned, list):
        raise SnapshotError("malformed", "'owned' must be a list")
    # Both optional: a member of an older heartwire sends neither.
    incarnation = obj.get("incarnation", "")
    if not isinstance(incarnation, str) or not _INCARNATION.fullmatch(incarnation or "-"):
        raise SnapshotError("malformed", f"'incarnation' {incarnation!r:.80}: [0-9A-Za-z_-]{{,64}}")
    leaving = obj.get("leaving", False)
    if not isinstance(leaving, bool):
        raise SnapshotError("malformed", f"'leaving' {leaving!r:.20} is not a bool")
    member = _member(obj.get("member"), "'member'")
    owned_t = tuple(sorted({_count(k, "'owned'", top) for k in owned}))
    counts, dropped = _state_counts(obj.get("counts"), "'counts'")
    by_shard: dict[int, dict[str, int]] | None = None
    raw = obj.get("shard_counts")  # absent from the statuses of older members
    if raw is not None:
        if not isinstance(raw, dict):
            raise SnapshotError("malformed", "'shard_counts' must be an object")
        by_shard = {}
        for k, v in raw.items():
            ok = isinstance(k, str) and 0 < len(k) <= 6 and k.isascii() and k.isdigit()
            shard = int(k) if ok else -1
            if shard not in owned_t:  # (a shard's count comes from its owner only)
                raise SnapshotError(
                    "malformed", f"'shard_counts' key {k!r:.20} is not a shard in 'owned'"
                )
            by_shard[shard], n = _state_counts(v, f"shard_counts[{shard}]")
            dropped += n
    status = MemberStatus(
        member,
        owned_t,
        counts,
        _period(obj.get("period"), "'period'"),
        _finite(obj.get("sent"), "'sent'"),
        shard_counts=by_shard,
        incarnation=incarnation,
        leaving=leaving,
    )
    return status, top + 1, dropped


def _decode_status(body: bytes, layout: ShardLayout | str, codec: BeatCodec) -> MemberStatus:
    """A member's status from ``body``; :class:`SnapshotError` for anything else (``layout`` a
    group's name: any shard count). Counts under names not in :data:`STATE_NAMES` are dropped."""
    return _decode_status_counted(body, layout, codec)[0]


class MonitorGroupMember:
    """One member of the monitor group ``layout``: a :class:`~heartwire.HeartbeatMonitor`
    (built with ``broker=None``: the member subscribes for it) fed from every shard queue of the
    group, of which the broker lets it be the active consumer of some (``docs/groups.md``).

    - It subscribes to every shard queue (RabbitMQ: the single-active-consumer queues of
      :func:`declare_rabbitmq`, through ``/amq/queue/``; ActiveMQ: ``activemq.exclusive``), each
      beat recorded by the core straight off the socket under the topic its body names.
    - Each ``period`` it sends a tick into every shard queue; the member the broker delivers a
      shard's tick to **owns** the shard (it learns it, it never decides it). Ownership ends
      with the connection, when it releases the shard, or when nothing (not even a tick) came
      for 5 periods.
    - Taking a shard over: it reads the shard's state snapshot (:func:`read_snapshot`) and
      adopts each topic there it does not watch yet (``monitor.adopt``, one batch): one not
      FAILED gets a fresh start (a full period to beat); a FAILED one keeps its outage, with
      no new first ``failed`` (the next is ``failed(missed + 1)`` one period on, with the
      original ``since``; its next beat a ``resumed`` with the downtime from that ``since``).
      A record the monitor refuses (another pattern, a paused topic) is counted in
      :attr:`refused` and the others adopted.
    - A shard it no longer owns: its topics are removed from the monitor (by the worker:
      :meth:`_sweep` says which events that can still give).
    - Each period, and a quarter period at most after a topic failed or resumed: a snapshot
      per owned shard (:func:`publish_snapshot`). Each period: a status
      message on :func:`status_topic` (:class:`MemberStatus`), from which it counts the members
      alive (:meth:`members`); owning more than ``ceil(shards / members)`` it releases one shard
      (unsubscribe and subscribe again: the broker's next consumer in line gets it), at most
      one per period, and less often (back-off up to 32 periods) while released shards come
      straight back to it. :meth:`stop` sends a last status saying it leaves: the others stop
      counting it at once.
    - Each step of the worker (ticks, snapshots, status, balance; ticks and snapshots per
      shard) is tried on its own: a failure is counted in :attr:`failures` and logged at most
      every :data:`FAILURE_LOG_EVERY` seconds, and the other steps still run.
    - Statuses refused (:attr:`statuses_refused`, by reason; also in :attr:`refused`): not
      decoding or not signed with ``key`` (the snapshot reasons); ``stale`` (``sent`` older
      than :data:`MEMBER_AGE_PERIODS` of its sender's periods plus :data:`STATUS_AGE_SKEW`);
      ``replayed`` (not newer than the last of that member); ``left`` (a member that said it
      left); ``too_many`` (beyond :data:`MAX_MEMBERS`); ``same_name``: another member (another
      incarnation) under this member's name, logged once. Two members with one name do not
      share shards: each counts only itself under that name.

    ``member`` names it in the group (1 to 128 ASCII letters, digits and ``_-:.``, else
    ValueError; default: a random one); ``key`` signs snapshots and status messages (the
    group's key); ``balance=False`` never releases shards; ``snapshot_ttl``: the life of the
    snapshots of a release or a stop, ``periodic_snapshot_ttl`` of the others (default: 3
    periods, at least :data:`MEMBER_PERIODIC_TTL_MIN`, at most ``snapshot_ttl``). Use it as a
    context manager or call :meth:`start` / :meth:`stop`. Only over a
    :class:`~heartwire.transport.stomp.StompTransport`.
    """

    def __init__(
        self,
        transport: StompTransport,
        monitor: HeartbeatMonitor,
        layout: ShardLayout,
        *,
        member: str | None = None,
        key: bytes | str | None = None,
        balance: bool = True,
        snapshot_ttl: float = MEMBER_SNAPSHOT_TTL,
        periodic_snapshot_ttl: float | None = None,
    ) -> None:
        from heartwire.transport.stomp import StompTransport

        if not isinstance(transport, StompTransport):
            raise TypeError(f"transport must be a StompTransport, got {type(transport).__name__}")
        if monitor.broker is not None:
            raise ValueError(
                "monitor must be built with broker=None: the member subscribes to the shard "
                f"queues for it (got a monitor on {monitor.broker!r})"
            )
        if not isinstance(layout, ShardLayout):
            raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
        if member is None:
            import uuid

            member = uuid.uuid4().hex[:12]
        self.member = _member(member, "member")
        if not isinstance(balance, bool):
            raise TypeError(f"balance must be a bool, got {balance!r}")
        self.transport = transport
        self.monitor = monitor
        self.layout = layout
        self._key = key
        self._codec = BeatCodec(key)
        self._balance = balance
        self._snapshot_ttl = _validate.seconds(snapshot_ttl, "snapshot_ttl")
        self._period = monitor.period
        if periodic_snapshot_ttl is None:
            periodic = min(self._snapshot_ttl, max(3 * self._period, MEMBER_PERIODIC_TTL_MIN))
        else:
            periodic = _validate.seconds(periodic_snapshot_ttl, "periodic_snapshot_ttl")
        self._periodic_ttl = periodic
        self._lock = threading.Lock()
        # shard -> time.monotonic() of its last delivery to us (we own it)
        self._owned: dict[int, float] = {}
        self._owned_wall: dict[int, float] = {}  # shard -> time.time() when we came to own it
        # shard -> when we lost it (its topics are swept out of the monitor)
        self._lost: dict[int, float] = {}
        self._taking: list[int] = []  # shards to take over (snapshot read by the worker)
        # Shards whose snapshot is being read: no snapshot of ours for them until it is read,
        # or the reader could take our own (newer, without the old owner's topics) for it.
        # (shard -> takeovers under way: a shard lost and owned again can have two.)
        self._reading: collections.Counter[int] = collections.Counter()
        self._readers: set[threading.Thread] = set()  # the takeover threads (stop joins them)
        # shard -> the last snapshot we published of it: a shard we own again (our connection
        # lost and back, the shard released and back) whose state queue is empty (its snapshots
        # expired while we hung) is taken over from what we knew, not from nothing.
        self._last_own: dict[int, ShardSnapshot] = {}
        self._members: dict[str, tuple[float, MemberStatus]] = {}  # by member: (seen, status)
        # (member, incarnation) -> when it said it left: its later statuses are refused (a
        # status of its worker written after the leaving one would count it again). Capped.
        self._left: dict[tuple[str, str], float] = {}
        # (member, incarnation) -> the newest ``sent`` taken from it, kept after the member is
        # forgotten (capped, oldest out): a replay of one of its statuses is refused even then
        # (else each replay, once the member aged out, counted it again for 3 periods).
        self._last_sent: dict[tuple[str, str], float] = {}
        self._incarnation = ""  # drawn at each start()
        self._started_wall = 0.0
        self._same_name_logged = False
        # Release back-off: shard -> when released; the wait between releases grows while
        # released shards come straight back to us (we are the only consumer in line).
        self._released_at: dict[int, float] = {}
        self._release_backoff = 0.0
        self._sweep_now = threading.Event()  # a loss to sweep (set off the worker's thread)
        self._failure_logged: dict[str, float] = {}
        self._subs: dict[int, Any] = {}
        self._gen: dict[int, int] = {}  # shard -> generation of its current subscription
        self._status_sub: Any = None
        self._seq = 0
        self._last_release = 0.0
        self._started_at = 0.0
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._last_run = 0.0
        self._outages = (0, 0)  # FAILED topics, resumed events, at the worker's last look
        #: Counters: shards taken over, released, released and straight back (``bounced``),
        #: snapshots, statuses and topic records refused; the longest gap between two runs of
        #: the worker (seconds; a quarter period when all is well).
        self.takeovers = 0
        self.releases = 0
        self.bounced = 0
        self.refused = 0
        self.slowest = 0.0
        #: Status messages refused, by reason (:data:`STATUS_REASONS` or a snapshot reason).
        self.statuses_refused: dict[str, int] = {}
        #: The worker's failed steps, by step (``tick``, ``snapshot``, ``status``, ...).
        self.failures: dict[str, int] = {}
        #: The last 1000 takeovers: (shard, the snapshot's member or None if none was read,
        #: its topics, its FAILED topics, when read as Unix seconds).
        self.taken: collections.deque[tuple[int, str | None, int, int, float]] = collections.deque(
            maxlen=1000
        )

    # -- what it knows ----------------------------------------------------------------------

    @property
    def owned(self) -> frozenset[int]:
        """The shards this member owns now (the broker delivers them to it)."""
        with self._lock:
            return frozenset(self._owned)

    def members(self) -> dict[str, MemberStatus]:
        """The members alive (this one included), by name: each heard from within the last
        :data:`MEMBER_AGE_PERIODS` of its own periods (as it said in its status), and not
        since left."""
        now = time.monotonic()
        with self._lock:
            # A member whose last status claims a shard the broker gave us after it was sent
            # has lost that shard since (it died, or released it): not counted until a newer
            # status says where it stands. Else a survivor counts a member killed -9 for 3
            # periods and releases shards to itself. (Comparing its clock with ours: skew only
            # delays counting a member in the moment a shard moves between the two of us.)
            since = {k: self._owned_wall.get(k, 0.0) for k in self._owned}
            seen = {
                m: st
                for m, (t, st) in self._members.items()
                if now - t <= MEMBER_AGE_PERIODS * st.period
                and not any(since.get(k, -math.inf) > st.sent for k in st.owned)
            }
        seen[self.member] = self._own_status()
        return seen

    def _own_status(self, leaving: bool = False) -> MemberStatus:
        with self._lock:
            owned = () if leaving else tuple(sorted(self._owned))
        counts = {} if leaving else dict(self.monitor.counts())
        return MemberStatus(
            self.member,
            owned,
            counts,
            self._period,
            time.time(),
            incarnation=self._incarnation,
            leaving=leaving,
        )

    def _prune(self, now: float) -> None:
        """Forget the statuses of members gone (aged out) and the oldest members left."""
        with self._lock:
            for m, (t, st) in list(self._members.items()):
                if now - t > MEMBER_AGE_PERIODS * st.period:
                    del self._members[m]
            while len(self._left) > MAX_MEMBERS:
                del self._left[next(iter(self._left))]  # the oldest (insertion order)
            while len(self._last_sent) > 2 * MAX_MEMBERS:
                del self._last_sent[next(iter(self._last_sent))]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> MonitorGroupMember:
        """Start the monitor, subscribe to the group's status topic and every shard queue, and
        start the member's worker thread (ticks, snapshots, status, balance); returns self."""
        import uuid

        self.monitor.start()
        self.transport.add_observer(self)
        self._started_at = time.monotonic()
        self._started_wall = time.time()
        self._incarnation = uuid.uuid4().hex
        self._status_sub = self.transport.subscribe(
            status_topic(self.layout.group), self._on_status
        )
        for shard in range(self.layout.shards):
            self._subs[shard] = self._subscribe_shard(shard)
        self._stop.clear()
        self._worker = threading.Thread(
            target=self._run, name=f"heartwire-group-{self.member}", daemon=True
        )
        self._worker.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker and the takeovers (a read under way gives back what it took),
        publish a snapshot of each shard still owned (living ``snapshot_ttl``), cancel the
        subscriptions (the broker hands the shards to the next members in line) and stop the
        monitor."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        # First: the others stop counting us at once (see the class doc). Each step below
        # takes only what is left of ``timeout``.
        self._publish_leaving(min(self._period, timeout))
        if self._worker is not None:
            # The worker ends within a tick send (at most _WORKER_SEND_TIMEOUT, it checks the
            # stop between sends) or a snapshot send.
            self._worker.join(max(0.0, deadline - time.monotonic()))
            self._worker = None
        self._join_readers(deadline)
        self._final_snapshots(deadline)
        self.transport.remove_observer(self)
        subs, self._subs = self._subs, {}
        for sub in subs.values():
            sub.cancel()
        if self._status_sub is not None:
            self._status_sub.cancel()
            self._status_sub = None
        with self._lock:
            self._owned.clear()
        self.monitor.stop(max(0.1, deadline - time.monotonic()))

    def _join_readers(self, deadline: float) -> None:
        """Wait (until ``deadline``) for the takeover threads: ``_stop`` ends their reads
        early, and each gives back what it took or settles (its snapshot out)."""
        with self._lock:
            readers = list(self._readers)
        for thread in readers:
            if thread.ident is not None:  # started (the worker, joined first, starts them)
                thread.join(max(0.0, deadline - time.monotonic()))

    def _final_snapshots(self, deadline: float) -> None:
        """A last snapshot of each shard still owned (none being read: a read given back left
        the old owner's state in the queue), living ``snapshot_ttl``: the topics first heard
        since the last periodic one reach the next owner."""
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            self._publish_snapshots(ttl=self._snapshot_ttl, timeout=min(left, self._period))
        except Exception as exc:  # the connection down: the periodic ones are there
            import logging

            logging.getLogger(__name__).warning(
                "group member %s: no final snapshot: %r", self.member, exc
            )

    def __enter__(self) -> MonitorGroupMember:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _subscribe_shard(self, shard: int) -> Any:
        dialect = self.transport.dialect
        d = named(dialect) if isinstance(dialect, str) else dialect
        intake = self.monitor._intake  # the monitor's own intake: beats recorded natively
        # Each subscription of a shard gets its own generation: a delivery still in flight to
        # the one cancelled by a release must not make us the owner again (we would read, and
        # so take away, the snapshot the new owner needs).
        with self._lock:
            gen = self._gen[shard] = self._gen.get(shard, 0) + 1
        return self.transport.subscribe_destination_intake(
            shard_destination(self.layout, shard, d),
            intake,
            functools.partial(self._on_message, shard, gen),
            self.monitor._report_refusals,
            layout=self.layout,
            shard=shard,
            headers=_subscribe_headers(d),
        )

    # -- the receiving thread -----------------------------------------------------------------

    def _delivered(self, shard: int, gen: int) -> None:
        """A delivery of ``shard`` to our subscription ``gen``: we own the shard (a takeover if
        we did not), unless that subscription is no longer the current one."""
        now = time.monotonic()
        with self._lock:
            if shard not in self._subs or self._gen.get(shard) != gen:
                return  # released (a delivery in flight to the old subscription) or stopping
            new = shard not in self._owned
            self._owned[shard] = now
            if new:
                self._owned_wall[shard] = time.time()
                self._lost.pop(shard, None)
                self._taking.append(shard)
                released = self._released_at.pop(shard, None)
                if released is not None and now - released <= 2 * self._period:
                    # Released and straight back: nobody else was in line (the member we
                    # counted is gone). Wait longer before the next release.
                    self.bounced += 1
                    self._release_backoff = min(
                        max(2 * self._release_backoff, 2 * self._period), 32 * self._period
                    )
                # Marked being read in the same hold of the lock that makes it owned: else the
                # worker's next snapshot round (on another thread) could publish ours for it
                # before the read, and the read would pick ours (newest) over the old owner's.
                self._reading[shard] += 1

    def _on_message(self, shard: int, gen: int, _link: Any, message: Any) -> None:
        """What the native path left: a tick, or a beat its decoder was not sure of."""
        body = message.body
        if isinstance(body, str):
            body = body.encode("utf-8")
        if body.startswith(_TICK_PREFIX) or TICK_HEADER in (message.headers or {}):
            self._delivered(shard, gen)
            return
        self._delivered(shard, gen)
        intake = self.monitor._intake
        # The same shard check as on the native path: a beat of another shard's topic is refused.
        done = intake.ingest(body, None, shard=(self.layout.shards, shard))
        if done is None:
            try:
                beat = self.monitor._codec.decode(body, None)
            except DecodeError as exc:
                intake.refuse(exc.reason, f"message to shard {shard}: {str(exc)[:300]}")
            else:
                intake.record(
                    beat.topic,
                    beat.seq,
                    beat.boot_id,
                    beat.sent_at,
                    beat.period,
                    beat.state == "down",
                    beat.reason,
                    shard=(self.layout.shards, shard),
                )
        if intake.pending:
            self.monitor._report_refusals()

    def _on_status(self, message: Any) -> None:
        try:
            st = _decode_status(message.body, self.layout, self._codec)
        except SnapshotError as exc:
            self._refuse_status(exc.reason)
            return
        wall = time.time()
        if st.member == self.member:
            if st.incarnation == self._incarnation or st.sent < self._started_wall:
                return  # our own, or one of an earlier run of ours still in flight
            self._refuse_status("same_name")
            if not self._same_name_logged:
                self._same_name_logged = True
                _log.warning(
                    "group %s: another member is named %r too (incarnation %s, ours %s): "
                    "the two do not share shards; give each member its own name",
                    self.layout.group,
                    self.member,
                    st.incarnation or "none",
                    self._incarnation,
                )
            return
        # A status older than its sender's age window (plus clock skew) says nothing about now:
        # a member long gone, or a replay. Counting it would shrink our share: releases to
        # ourselves, each a takeover restarting the shard's topics.
        # Either way: one dated ahead (its host's clock stepped forward) would become the bar
        # every later status of that member must pass ("replayed") until our clock caught up.
        if (
            wall - st.sent > MEMBER_AGE_PERIODS * st.period + STATUS_AGE_SKEW
            or st.sent - wall > STATUS_AGE_SKEW
        ):
            self._refuse_status("stale")
            return
        now = time.monotonic()
        reason = None
        with self._lock:
            old = self._members.get(st.member)
            key = (st.member, st.incarnation)
            if key in self._left:
                reason = "left"
            elif st.sent <= self._last_sent.get(key, -math.inf):
                reason = "replayed"  # not newer than the last: a replay must not refresh it
            elif st.leaving:
                if old and old[1].incarnation == st.incarnation:
                    del self._members[st.member]  # (not another incarnation under its name)
                self._left.pop((st.member, st.incarnation), None)
                self._left[(st.member, st.incarnation)] = now  # newest last (pruned oldest first)
            elif old is None and len(self._members) >= MAX_MEMBERS:
                reason = "too_many"
            else:
                if old is None or old[1].incarnation != st.incarnation:
                    self._release_backoff = 0.0  # a member new to us: its share is due now
                self._members[st.member] = (now, st)
                self._last_sent.pop(key, None)
                self._last_sent[key] = st.sent  # newest last (pruned oldest first)
        if reason is not None:
            self._refuse_status(reason)

    def _refuse_status(self, reason: str) -> None:
        with self._lock:
            self.refused += 1
            self.statuses_refused[reason] = self.statuses_refused.get(reason, 0) + 1

    # connection observer: every shard is lost with the connection (the broker hands them on)
    def on_disconnected(self, broker: str, reason: str) -> None:
        self._lose_all()

    def on_switched(self, from_broker: str, to_broker: str) -> None:
        self._lose_all()

    def _lose_all(self) -> None:
        # On the transport's failover thread: only marks the shards lost. The worker sweeps
        # them (a quarter period at most, or between two tick sends): a sweep can wait for
        # room in a "block" listener queue, which must not stall the reconnection.
        now = time.monotonic()
        with self._lock:
            for shard in self._owned:
                self._lost[shard] = now
            self._owned.clear()
        self._sweep_now.set()

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        step = self._period / 4
        next_beat = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            self.slowest = max(self.slowest, now - self._last_run) if self._last_run else 0.0
            self._last_run = now
            # Each step on its own: one failing (a send timing out under producer flow
            # control, say) must not skip the others (a status missed makes the others
            # rebalance around us).
            self._try("expire", self._expire, now)
            self._try("sweep", self._sweep, now)
            self._try("takeover", self._take_over)
            moved = self._try("outages", self._outages_moved)
            if now >= next_beat:
                next_beat = now + self._period
                self._try("ticks", self._send_ticks)
                self._try("snapshots", self._publish_snapshots)
                self._try("status", self._publish_status)
                self._try("prune", self._prune, now)
                if self._balance:
                    self._try("rebalance", self._rebalance, now)
            elif moved:
                # A topic failed or resumed: the snapshots go out now (a quarter period at
                # most after it), not at the next round, so that a member dying within
                # the period leaves its outages to the next owner.
                self._try("snapshots", self._publish_snapshots)
            self._stop.wait(step)

    def _try(self, step: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``; a failure counted and logged (:meth:`_failed`), None returned.
        Nothing once stopping: stop() does what is left, within its timeout."""
        if self._stop.is_set():
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self._failed(step, exc)
            return None

    def _failed(self, step: str, exc: BaseException) -> None:
        """Count a failed ``step``; log it, with its traceback, at most every
        :data:`FAILURE_LOG_EVERY` seconds per step (with the count so far)."""
        now = time.monotonic()
        with self._lock:
            n = self.failures[step] = self.failures.get(step, 0) + 1
            last = self._failure_logged.get(step)
            if last is not None and now - last < FAILURE_LOG_EVERY:
                return
            self._failure_logged[step] = now
        _log.error(
            "group %s member %s: %s failed (%d so far): %s",
            self.layout.group,
            self.member,
            step,
            n,
            exc,
            exc_info=exc,
        )

    def _outages_moved(self) -> bool:
        """Whether a topic failed or resumed since the last call: the FAILED count or the
        resumed events changed (two native counters: no pass over the topics)."""
        det = self.monitor.detector
        key = (det.counts().get("FAILED", 0), det.stats().get("resumed", 0))
        moved = key != self._outages
        self._outages = key
        return moved

    def _expire(self, now: float) -> None:
        # No delivery (not even the ticks every member sends each period) for 5 periods: the
        # broker gives the shard to someone else (a connection we have not yet seen die).
        with self._lock:
            for shard, last in list(self._owned.items()):
                if now - last > 5 * self._period:
                    del self._owned[shard]
                    self._lost[shard] = now

    def _sweep(self, now: float) -> None:
        """Remove the topics of the shards lost in the last 3 periods (beats read just before
        the loss may learn some again: swept again). On the worker's thread only.

        A removal gives no event of its own (the topic is not resolved, not failed), but a
        removed FAILED topic stops suppressing its dependents (``monitor.depends``): those still
        down and never alerted get their ``Failed`` now, and under the ``"block"`` listener
        policy the sweep waits for room in the listener queue (the worker's ticks and status
        wait with it)."""
        self._sweep_now.clear()
        with self._lock:
            for shard in list(self._lost):
                if shard in self._owned:
                    del self._lost[shard]
            lost = set(self._lost)
        if not lost:
            return
        for st in self.monitor.statuses():
            if self.layout.shard_of(st.topic) in lost:
                self.monitor.remove(st.topic)
        # Forgotten only once swept 3 periods after the loss (a worker held up, or the process
        # stopped, sweeps them then, before the detector's wake-up guard runs out).
        with self._lock:
            for shard in lost:
                when = self._lost.get(shard)
                if when is not None and now - when > 3 * self._period:
                    del self._lost[shard]

    def _take_over(self) -> None:
        """Start a thread per shard newly owned to read its snapshot (each read waits for the
        state queue: they go in parallel, and never hold up the ticks and sweeps)."""
        while not self._stop.is_set():
            with self._lock:
                if not self._taking:
                    return
                shard = self._taking.pop(0)
                if shard not in self._owned:
                    self._done_reading(shard)  # lost before the read began
                    continue
                self.takeovers += 1
                thread = threading.Thread(
                    target=self._adopt_snapshot,
                    args=(shard, self._gen.get(shard)),
                    name=f"heartwire-group-takeover-{shard}",
                    daemon=True,
                )
                self._readers.add(thread)
            thread.start()

    def _done_reading(self, shard: int) -> None:
        # Under self._lock.
        self._reading[shard] -= 1
        if self._reading[shard] <= 0:
            del self._reading[shard]

    def _adopt_snapshot(self, shard: int, gen: int | None) -> None:
        """Read ``shard``'s snapshot holding it (:class:`_HeldRead`), adopt it, publish ours and
        only then consume the one read; give it back instead if the shard is lost meanwhile
        (another subscription generation, not owned) or the member stops."""
        held: _HeldRead | None = None
        handed_back = False
        try:
            held = _HeldRead(self.transport, self.layout, shard, self._key, ttl=self._snapshot_ttl)
            # Up to 2 s for the first snapshot: under load a broker took over 0.2 s to
            # dispatch a queue to a new consumer (ActiveMQ, 2000 topics beating), and a read
            # that gives up too soon loses the state. Nothing is lost if we die meanwhile: what
            # the read took is unacknowledged until ours is out.
            held.read(2.0, 0.2, self._stop)
            snap = held.best
            with self._lock:
                mine = self._last_own.get(shard)
            # Ours, only if the queue held none and not older than a stop's snapshot lives: the
            # state queue empties when snapshots expire (we hung longer than their TTL), and
            # what we knew before is then the newest anyone published. Any snapshot in the
            # queue wins: it was published since (comparing its ``sent`` with ours would
            # compare two hosts' clocks).
            if snap is None and mine is not None and time.time() - mine.sent <= self._snapshot_ttl:
                snap = mine
            with self._lock:
                self.refused += len(held.refused)
                self.taken.append(
                    (
                        shard,
                        None if snap is None else snap.member,
                        0 if snap is None else len(snap.topics),
                        0 if snap is None else len(snap.failed),
                        time.time(),
                    )
                )
            if self._stop.is_set() or not self._owns(shard, gen):
                return  # given back (finally)
            if snap is not None:
                self._adopt(snap)
            # Ours (with what was adopted) out, then the old one consumed; if ours cannot go
            # out (the shard lost meanwhile: S1's check in _publish_snapshots), it goes back.
            sent = held.settle(lambda: shard in self._publish_snapshots({shard}, reading=shard))
            handed_back = not sent
        except Exception:
            import logging

            logging.getLogger(__name__).exception("taking shard %d over", shard)
        finally:
            if held is not None and not held.done:
                try:
                    held.hand_back()
                except Exception:
                    import logging

                    logging.getLogger(__name__).exception("shard %d's snapshot back", shard)
                handed_back = True
            with self._lock:
                self._done_reading(shard)
                # Given back: the old owner's state is in the queue again and we do not hold
                # it, so no snapshot of ours for the shard (a stop's last one would cover the
                # old owner's). Owned again with the next delivery: a new takeover.
                given_back = handed_back and self._gen.get(shard) == gen
                if given_back and self._owned.pop(shard, None) is not None:
                    self._lost[shard] = time.monotonic()
                self._readers.discard(threading.current_thread())

    def _owns(self, shard: int, gen: int | None) -> bool:
        with self._lock:
            return shard in self._owned and self._gen.get(shard) == gen

    def _adopt(self, snap: ShardSnapshot) -> None:
        mon = self.monitor
        # Topics heard since the takeover are left as they are: their beats are newer than
        # the snapshot (a concurrent first beat between this filter and adopt is handled by
        # adopt itself: a known topic keeps its deadlines, or resumes if its outage was older).
        rows = [rec for rec in snap.topics if rec.topic not in mon]
        if not rows:
            return
        if mon.paused:
            # The whole monitor paused (the group's pause): the core carries no outage to a
            # paused topic, so FAILED ones come in as a fresh start, paused, rather than be
            # refused and forgotten (after the resume: a full period, then a first failed).
            rows = [
                dataclasses.replace(rec, failed_since=None, missed=0, reason=None)
                if rec.failed_since is not None
                else rec
                for rec in rows
            ]
        # One batch: FAILED records carry their outage over (no new first failed; the next
        # failed(missed + 1) one period on; a beat -> resumed, downtime from failed_since),
        # the others a fresh start (a full period to beat). adopt checks every record first
        # and refuses the whole batch for one bad record (another pattern than ours, a paused
        # topic with an outage, ...): then each record is adopted alone, the bad ones counted
        # as refused. A fallback rather than our own validation: adopt's checks stay the one
        # rule, and the per-record path runs only for a snapshot holding a bad record.
        try:
            mon.adopt(rows)
        except (TypeError, ValueError):
            bad = 0
            for rec in rows:
                try:
                    mon.adopt([rec])
                except (TypeError, ValueError):
                    bad += 1
            with self._lock:
                self.refused += bad
        # Paused by name at the old owner: paused here too, after adopt (adopt refuses an
        # outage carried to a topic already paused; these were unknown, so adopted first).
        for rec in rows:
            if rec.paused:
                with contextlib.suppress(KeyError):  # refused above, or removed meanwhile
                    mon.pause(rec.topic)

    def _sweep_if_lost(self) -> None:
        """Between two sends: shards lost meanwhile (sends wait up to a period each for a
        reconnection) are swept now, not after the whole round."""
        if self._sweep_now.is_set():
            self._try("sweep", self._sweep, time.monotonic())

    def _send_ticks(self) -> None:
        body = _TICK_PREFIX + f'"member":{_json_str(self.member)}}}'.encode()
        for shard in range(self.layout.shards):
            if self._stop.is_set():
                return  # stopping: stop() waits for this thread
            self._sweep_if_lost()
            where = functools.partial(shard_destination, self.layout, shard)
            try:  # per shard: one send timing out does not skip the others
                # A short wait: with the connection down every tick fails fast (counted; the
                # next round tries again) rather than holding the worker a period per shard.
                self.transport.send_to(
                    where,
                    body,
                    {TICK_HEADER: self.member},
                    timeout=min(self._period, _WORKER_SEND_TIMEOUT),
                )
            except Exception as exc:
                self._failed("tick", exc)

    def _publish_snapshots(
        self,
        only: set[int] | None = None,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        reading: int | None = None,
    ) -> set[int]:
        """A snapshot of each shard owned (of ``only``), but of none being read (except
        ``reading``, by its own takeover once adopted), living ``ttl`` (default: the periodic
        TTL); returns the shards sent."""
        with self._lock:
            owned = {k for k in self._owned if k == reading or k not in self._reading}
            gens = {k: self._gen.get(k) for k in owned}
        if only is not None:
            owned &= only
        if not owned:
            return set()
        by_shard = _shard_records(self.monitor, self.layout, owned, marks=True)
        sent: set[int] = set()
        for shard, rows in by_shard.items():
            if self._stop.is_set() and threading.current_thread() is self._worker:
                break  # stopping: stop() sends the last snapshots itself
            self._sweep_if_lost()
            # Checked again after the rows are collected (S1, S2): a shard released, lost with
            # the connection or being read by a new takeover meanwhile gets no snapshot from
            # us: it would be newer than the new owner's (or read by its takeover) and leave
            # out what the new owner knows. The send itself is outside the lock (I/O).
            with self._lock:
                if (
                    shard not in self._owned
                    or self._gen.get(shard) != gens[shard]
                    or (shard != reading and shard in self._reading)
                    or shard not in self._subs
                ):
                    continue
                self._seq += 1
                seq = self._seq
            snap = ShardSnapshot(self.layout, shard, self.member, seq, time.time(), tuple(rows))
            try:  # per shard: one send timing out does not skip the others' snapshots
                publish_snapshot(
                    self.transport,
                    snap,
                    self._key,
                    ttl=self._periodic_ttl if ttl is None else ttl,
                    timeout=self._period if timeout is None else timeout,
                )
            except Exception as exc:
                self._failed("snapshot", exc)
                continue
            sent.add(shard)
            with self._lock:
                self._last_own[shard] = snap
        return sent

    def _publish_status(self) -> None:
        st = self._own_status()
        st = dataclasses.replace(
            st, shard_counts=_shard_counts(self.monitor, self.layout, st.owned)
        )
        body = _encode_status(self.layout, st, self._codec)
        self.transport.publish(status_topic(self.layout.group), body, timeout=self._period)

    def _publish_leaving(self, timeout: float) -> None:
        """The last status (from :meth:`stop`): leaving, so the others drop us at once rather
        than count us for 3 more periods (and shrink their share: releases to themselves).
        A status the worker sends after it is refused by the others (``left``). Not sent
        without a connection (it would only wait for one)."""
        if self._worker is None or self.transport.current_link is None:
            return  # not started, or no connection
        try:
            body = _encode_status(self.layout, self._own_status(leaving=True), self._codec)
            self.transport.publish(status_topic(self.layout.group), body, timeout=timeout)
        except Exception as exc:
            self._failed("leaving", exc)

    def _rebalance(self, now: float) -> None:
        # Wait until the others' status can have come (2 periods from the start), and one
        # period after the last release, so the members' view of each other settles.
        # Released shards that did not come back within 2 periods went to another member: the
        # back-off ends (one that came back made it grow, in _delivered).
        with self._lock:
            for shard, when in list(self._released_at.items()):
                if now - when > 2 * self._period:
                    del self._released_at[shard]
                    if shard not in self._owned:
                        self._release_backoff = 0.0
            wait = max(self._period, self._release_backoff)
        if now - self._started_at < 2 * self._period or now - self._last_release < wait:
            return
        share = math.ceil(self.layout.shards / len(self.members()))
        with self._lock:
            # Never a shard whose snapshot is being read: its state would be lost between two
            # readers (ActiveMQ shares a queue's messages among its consumers).
            free = set(self._owned) - self._reading.keys()
            if len(self._owned) <= share or not free:
                return
            shard = max(free)  # any; the highest, so a test can tell
        self._release(shard)
        self._last_release = now

    def _release(self, shard: int) -> None:
        """Hand ``shard`` to the next member in the broker's line: snapshot first, then
        unsubscribe and subscribe again (at the back of the line)."""
        self._publish_snapshots({shard}, ttl=self._snapshot_ttl)  # lives past the handover
        with self._lock:
            sub = self._subs.pop(shard, None)
            self._owned.pop(shard, None)
            self._lost[shard] = self._released_at[shard] = time.monotonic()
            # Handed on: the next owner's snapshots (or our release's, 60 s) are the state now,
            # not what we knew.
            self._last_own.pop(shard, None)
        if sub is not None:
            sub.cancel()
        self._sweep(time.monotonic())  # at once (beats read meanwhile: swept again later)
        self.releases += 1
        new = self._subscribe_shard(shard)
        with self._lock:
            self._subs[shard] = new


def _json_str(text: str) -> str:
    import json

    return json.dumps(text)


@dataclass(frozen=True)
class GroupStatus:
    """A group as its members' status messages show it: each member's last status (by name),
    the owner of each shard that has one, and the group's counts by state.

    ``refused``: the status messages left out, by reason (a :data:`SNAPSHOT_REASONS` one:
    ``bad_signature`` or ``unsigned`` when the key is wrong or missing); ``unknown_states``:
    count entries dropped because their state name is not one of :data:`STATE_NAMES`;
    ``waited``: how long :func:`group_status` listened (seconds)."""

    group: str
    shards: int
    members: dict[str, MemberStatus]
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    unknown_states: int = 0
    waited: float = 0.0

    @property
    def owners(self) -> dict[int, str]:
        """The member owning each shard (shards nobody claims are missing): of two statuses
        claiming a shard (heard across a handover), the newer one's sender."""
        out: dict[int, str] = {}
        for name, st in sorted(self.members.items(), key=lambda m: (m[1].sent, m[0])):
            for shard in st.owned:
                out[shard] = name
        return out

    def shards_of(self, member: str) -> tuple[int, ...]:
        """The shards ``member`` owns by :attr:`owners` (not those a newer status claims)."""
        return tuple(k for k, name in sorted(self.owners.items()) if name == member)

    def counts_of(self, member: str) -> dict[str, int]:
        """``member``'s counts by state, of the shards it owns (:meth:`shards_of`): summed from
        its per-shard counts; from a status without them (an older member's), its whole counts
        if it owns any shard still, else nothing."""
        st = self.members.get(member)
        mine = self.shards_of(member)
        if st is None or not mine:
            return {}
        if st.shard_counts is None:
            return dict(st.counts)
        total: dict[str, int] = {}
        for shard in mine:
            for state, n in st.shard_counts.get(shard, {}).items():
                total[state] = total.get(state, 0) + n
        return total

    @property
    def counts(self) -> dict[str, int]:
        """The group's counts by state: each shard's topics counted once, from its owner's
        status (:meth:`counts_of` summed). A member of an older version, whose status has no
        per-shard counts, is counted whole while it owns a shard: a handover under way then
        counts the shards it gave away twice."""
        total: dict[str, int] = {}
        for name in self.members:
            for state, n in self.counts_of(name).items():
                total[state] = total.get(state, 0) + n
        return total

    def owner_of(self, topic: str) -> tuple[int, str | None]:
        """``(shard, member)`` watching ``topic`` (member None: its shard has no owner now)."""
        shard = shard_of(topic, self.shards)
        return shard, self.owners.get(shard)


#: By default :func:`group_status` listens at least this long (seconds) ...
_STATUS_WAIT = 2.5
#: ... and, until a first status comes, up to this long ...
_STATUS_FIRST_WAIT = 10.0
#: ... and never longer than this: members whose period is longer need ``wait``.
_STATUS_MAX_WAIT = 60.0


def _status_wait_end(longest: float, heard: bool) -> float:
    """How long the default :func:`group_status` listens, given the longest period among the
    statuses heard (0: none valid) and whether any status came (valid or refused)."""
    if longest > 0:
        # each member sends once a period: 1.25 periods (and transit) hears every member whose
        # period is at most the longest heard, whatever its phase
        return min(_STATUS_MAX_WAIT, max(_STATUS_WAIT, 1.25 * longest + 0.25))
    return _STATUS_WAIT if heard else _STATUS_FIRST_WAIT


def group_status(
    transport: StompTransport,
    group: str,
    *,
    key: bytes | str | None = None,
    wait: float | None = None,
) -> GroupStatus:
    """Listen to ``group``'s status topic and return what the members said
    (:class:`GroupStatus`; ``shards`` 0 and no members if none spoke). Statuses not signed with
    ``key`` (when given), not of this group, or malformed are left out and counted by reason
    (:attr:`GroupStatus.refused`).

    ``wait``: listen this long (seconds, at most one day). None (the default): listen 2.5 s,
    longer while no status came (up to 10 s), and until 1.25 times the longest period the
    statuses heard announce has passed (at most 60 s), so that every member with such a
    period is heard."""
    validate_topic(group, "group")
    if wait is not None:
        wait = _validate.seconds(wait, "wait")
        if wait > MAX_SECONDS:
            raise ValueError(
                f"wait must be at most {MAX_SECONDS:g} seconds (one day), got {wait!r}"
            )
    codec = BeatCodec(key)
    heard: dict[str, MemberStatus] = {}
    refused: dict[str, int] = {}
    shards = [0]
    unknown = [0]
    longest = [0.0]
    # (member, incarnation) that said it left: a later status of the same run (its worker's,
    # sent after the leaving one) does not bring it back, as the members refuse it ("left")
    left_runs: set[tuple[str, str]] = set()
    # Held only by the two threads below, never across I/O or a wait on another thread.
    cond = threading.Condition()

    def take(message: Any) -> None:
        try:
            st, n, dropped = _decode_status_counted(message.body, group, codec)
        except SnapshotError as exc:
            with cond:
                refused[exc.reason] = refused.get(exc.reason, 0) + 1
                cond.notify()
            return
        with cond:
            if st.leaving:
                left_runs.add((st.member, st.incarnation))
            elif (st.member, st.incarnation) in left_runs and st.incarnation:
                cond.notify()
                return
            if st.member not in heard or heard[st.member].sent <= st.sent:
                heard[st.member] = st
            shards[0] = n
            unknown[0] += dropped
            longest[0] = max(longest[0], st.period)
            cond.notify()

    start = time.monotonic()
    sub = transport.subscribe(status_topic(group), take)
    try:
        with cond:
            while True:
                if wait is not None:
                    end = wait
                else:
                    end = _status_wait_end(longest[0], bool(heard or refused))
                left = start + end - time.monotonic()
                if left <= 0:
                    break
                cond.wait(left)
    finally:
        sub.cancel()
    with cond:
        return GroupStatus(
            group,
            shards[0],
            {
                m: st
                for m, st in heard.items()
                if not st.leaving and (m, st.incarnation) not in left_runs
            },  # one that said it left is not a member (whatever came after)
            dict(refused),
            unknown[0],
            time.monotonic() - start,
        )
