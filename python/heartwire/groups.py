"""Monitor groups: several monitors sharing a fleet, standbys taking over (issue 18; the design
and the broker facts it rests on: ``docs/groups-design.md``).

Built so far:

- the shards on the wire. A group splits its topics over ``shards`` shards by a hash every
  process and language computes alike (:func:`shard_of`); a publisher given the group's
  :class:`ShardLayout` (``HeartbeatPublisher(..., shards=layout)``) sends each beat where the
  group consumes its shard: the shard's queue ``heartwire.<group>.<k>`` on ActiveMQ (a fixed
  number of broker destinations, not one per topic), the topic itself with a
  ``heartwire-shard`` header on RabbitMQ. See ``docs/shards.md``.
- the RabbitMQ objects a group needs (RabbitMQ's STOMP plugin cannot declare them):
  :func:`rabbitmq_definitions` (for a definitions file or ``rabbitmqctl import_definitions``)
  and :func:`declare_rabbitmq` (over AMQP 0-9-1 with pika: ``pip install
  'heartwire[groups]'``). ActiveMQ needs nothing: its queues are made on first use.
"""

from __future__ import annotations

from typing import Any

from heartwire import _validate
from heartwire.transport.dialect import RABBITMQ
from heartwire.transport.patterns import validate_pattern
from heartwire.transport.shards import (
    DEFAULT_SHARDS,
    MAX_SHARDS,
    SHARD_HEADER,
    ShardLayout,
    jump_hash,
    shard_of,
)

__all__ = [
    "DEFAULT_BEAT_TTL",
    "DEFAULT_MAX_BEATS",
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "SHARD_HEADER",
    "ShardLayout",
    "declare_rabbitmq",
    "exchange_name",
    "jump_hash",
    "rabbitmq_definitions",
    "shard_of",
    "state_queue",
]

#: How long a shard queue keeps an unconsumed beat by default (seconds): an old beat is worth
#: nothing once a newer one of its topic can have come.
DEFAULT_BEAT_TTL = 60.0
#: How many beats a shard queue holds at most by default (the oldest are dropped beyond it).
DEFAULT_MAX_BEATS = 1_000_000


def exchange_name(layout: ShardLayout) -> str:
    """The group's headers exchange on RabbitMQ: ``heartwire.<group>``."""
    return f"heartwire.{layout.group}"


def state_queue(layout: ShardLayout, shard: int) -> str:
    """The queue keeping the newest state snapshot of ``shard``: ``heartwire.<group>.<k>.state``."""
    return layout.queue(shard) + ".state"


def _shard_queue_arguments(
    beat_ttl: float, max_beats: int, expires: float | None
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "x-single-active-consumer": True,
        "x-message-ttl": round(beat_ttl * 1000),
        "x-max-length": max_beats,
        "x-overflow": "drop-head",
    }
    if expires is not None:
        args["x-expires"] = round(expires * 1000)
    return args


def _state_queue_arguments(expires: float | None) -> dict[str, Any]:
    # x-max-length 1 (drop-head): the newest snapshot only. The same arguments as the members'
    # STOMP SEND/SUBSCRIBE headers, or RabbitMQ refuses the declaration as inequivalent.
    args: dict[str, Any] = {"x-max-length": 1}
    if expires is not None:
        args["x-expires"] = round(expires * 1000)
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
    Bad arguments raise :class:`ValueError` / :class:`TypeError` naming them.
    """
    if not isinstance(layout, ShardLayout):
        raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
    validate_pattern(pattern)
    if not isinstance(vhost, str) or not vhost:
        raise ValueError(f"vhost must be a non-empty str, got {vhost!r}")
    beat_ttl = _validate.seconds(beat_ttl, "beat_ttl")
    if isinstance(max_beats, bool) or not isinstance(max_beats, int) or max_beats < 1:
        raise ValueError(f"max_beats must be an int >= 1, got {max_beats!r}")
    if expires is not None:
        expires = _validate.seconds(expires, "expires")
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
                "arguments": _shard_queue_arguments(beat_ttl, max_beats, expires),
            }
        )
        queues.append(
            {
                "name": state_queue(layout, shard),
                "vhost": vhost,
                "durable": True,
                "auto_delete": False,
                "arguments": _state_queue_arguments(expires),
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
