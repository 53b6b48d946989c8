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
"""

from __future__ import annotations

import collections
import functools
import math
import threading
import time
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

if TYPE_CHECKING:
    from heartwire.monitor import HeartbeatMonitor
    from heartwire.transport.stomp import StompTransport

__all__ = [
    "DEFAULT_BEAT_TTL",
    "DEFAULT_MAX_BEATS",
    "DEFAULT_SHARDS",
    "DEFAULT_SNAPSHOT_TTL",
    "MAX_SHARDS",
    "MAX_SNAPSHOT_BYTES",
    "SHARD_HEADER",
    "SNAPSHOT_REASONS",
    "SNAPSHOT_VERSION",
    "ShardLayout",
    "ShardSnapshot",
    "SnapshotError",
    "TopicRecord",
    "declare_rabbitmq",
    "decode_snapshot",
    "encode_snapshot",
    "exchange_name",
    "jump_hash",
    "publish_snapshot",
    "rabbitmq_definitions",
    "read_snapshot",
    "shard_of",
    "snapshot_of",
    "state_destination",
    "state_queue",
]

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
    the topic flaps."""

    topic: str
    failed_since: float | None = None
    missed: int = 0
    reason: str | None = None
    period: float | None = None
    alerted: bool = True
    silenced: bool = False
    suppressed_by: str | None = None
    flapping: bool = False

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


def _member(value: object, field: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= _MAX_MEMBER_LEN:
        raise SnapshotError(
            "malformed", f"{field} must be a str of 1 to {_MAX_MEMBER_LEN} characters"
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
    up, not flapping: :attr:`TopicRecord.plain_marks`). Raises
    :class:`SnapshotError` (``malformed``) naming a field that would not decode."""
    if not isinstance(snapshot, ShardSnapshot):
        raise TypeError(f"snapshot must be a ShardSnapshot, got {type(snapshot).__name__}")
    layout = snapshot.layout
    layout.queue(snapshot.shard)  # the shard's range, checked (ValueError naming it)
    rows = []
    for t in snapshot.topics:
        row: list[Any] = [t.topic, t.failed_since, t.missed, t.reason, t.period]
        if not t.plain_marks:
            row.append([t.alerted, t.silenced, t.suppressed_by, t.flapping])
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
    shard (PENDING, ALIVE or FAILED; paused ones are left out), each FAILED one with the start
    of its outage as Unix seconds (``monitor.wall_time``), its missed periods and its period.
    ``sent`` defaults to the wall clock now. Each topic's marks come from the monitor's
    detector (``Detector.marks``: what its listeners were told). (The outage's reason is not
    in the monitor's status yet: left out.) One pass over the monitor's topics, a shard hash
    each."""
    layout.queue(shard)  # the shard's range, checked
    marks = {m[0]: m[1:] for m in monitor.detector.marks()}
    topics = []
    for st in monitor.statuses():
        if st.state not in ("PENDING", "ALIVE", "FAILED") or layout.shard_of(st.topic) != shard:
            continue
        since = st.failed_since if st.state == "FAILED" else None
        alerted, silenced, parent, flapping = marks.get(st.topic, (True, False, None, False))
        topics.append(
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
            )
        )
    when = time.time() if sent is None else sent
    return ShardSnapshot(layout, shard, member, seq, when, tuple(topics))


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
    Waits up to ``wait`` seconds for the broker's receipt of the subscription, then until no
    snapshot came for ``quiet`` seconds (at most ``wait`` more).

    Raises ``RuntimeError`` when the transport has no connection (the broker's dialect picks
    the destination), and when the broker refuses the subscription or does not confirm it in
    ``wait`` seconds (naming the queue and the broker's ERROR): on RabbitMQ, a state queue
    never declared or gone with its ``expires`` (RabbitMQ also closes the connection then, so
    declare the group, :func:`declare_rabbitmq`, before reading). Never "no snapshot" for a
    queue it could not read."""
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
    best: ShardSnapshot | None = None
    refused: list[SnapshotError] = []

    def take(_link: Any, message: Any) -> None:
        with lock:
            arrived.append(message.body)
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
            if since >= quiet or now - start >= wait:
                break
            time.sleep(min(quiet - since, 0.05))
    finally:
        sub.cancel()
    decode_arrived()  # what came before the cancel
    return best, refused
