"""Shards of a monitor group on the wire: which shard a topic is in, and where its beats go.

A group splits its topics over ``shards`` shards (docs/groups-design.md). The shard of a topic is
``jump_hash(crc32(topic as UTF-8), shards)``:

- ``crc32`` is CRC-32/ISO-HDLC (``zlib.crc32``, ``java.util.zip.CRC32``, Go's
  ``crc32.ChecksumIEEE``): every process and language computes the same value (Python's own
  ``hash()`` of a str changes with each process);
- :func:`jump_hash` is the jump consistent hash of Lamping and Veach (arXiv:1406.2294), the
  function of Guava's ``Hashing.consistentHash``: growing a group from S to S + 1 shards moves
  only 1/(S + 1) of the topics.

Where a sharded beat goes, by broker (:meth:`ShardLayout.destination`):

- RabbitMQ (and the embedded broker): to its topic, ``/topic/<topic>``, as any beat; the SEND
  header ``heartwire-shard: <k>`` lets a headers exchange bound to ``amq.topic`` route it to the
  shard's queue, and a plain subscriber of the topic still sees it;
- ActiveMQ: to the shard's queue, ``/queue/heartwire.<group>.<k>``, so a group costs the broker
  a fixed number of destinations rather than one per topic (the beat's body names its topic).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from heartwire.transport.dialect import ACTIVEMQ, Dialect
from heartwire.transport.patterns import validate_topic

__all__ = [
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "SHARD_HEADER",
    "ShardLayout",
    "jump_hash",
    "shard_of",
]

#: The SEND header naming a sharded beat's shard (a decimal integer).
SHARD_HEADER = "heartwire-shard"
#: A group's shard count unless told otherwise.
DEFAULT_SHARDS = 16
#: The most shards a group may have (each is a broker queue, consumed by every member).
MAX_SHARDS = 4096

_MASK64 = (1 << 64) - 1
_LCG = 2862933555777941757  # the paper's 64-bit linear congruential multiplier


def jump_hash(key: int, buckets: int) -> int:
    """The bucket in ``[0, buckets)`` of the unsigned 64-bit ``key`` (jump consistent hash).

    ``key`` is taken modulo 2**64 (a negative one as its two's complement); ``buckets`` must be
    an int >= 1 (:class:`ValueError` naming it otherwise, :class:`TypeError` for a non-int).
    """
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"key must be an int, got {type(key).__name__} {key!r}")
    if isinstance(buckets, bool) or not isinstance(buckets, int):
        raise TypeError(f"buckets must be an int, got {type(buckets).__name__} {buckets!r}")
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    key &= _MASK64
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * _LCG + 1) & _MASK64
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b


def _check_shards(shards: object) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError(f"shards must be an int, got {type(shards).__name__} {shards!r}")
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be between 1 and {MAX_SHARDS}, got {shards}")
    return shards


def shard_of(topic: str, shards: int) -> int:
    """The shard in ``[0, shards)`` of ``topic``: ``jump_hash(crc32(topic.encode()), shards)``.

    ``topic`` must be a valid topic name and ``shards`` an int in ``[1, MAX_SHARDS]``
    (:class:`ValueError` / :class:`TypeError` naming the argument and value otherwise).
    """
    validate_topic(topic)
    return jump_hash(zlib.crc32(topic.encode()), _check_shards(shards))


@dataclass(frozen=True)
class ShardLayout:
    """A group's shards as its publishers and members see them: the group's name (a valid
    topic name: it names the broker queues ``heartwire.<group>.<k>``) and its shard count."""

    group: str
    shards: int = DEFAULT_SHARDS

    def __post_init__(self) -> None:
        validate_topic(self.group, "group")
        _check_shards(self.shards)

    def shard_of(self, topic: str) -> int:
        """The shard of ``topic`` in this group (:func:`shard_of`)."""
        return shard_of(topic, self.shards)

    def queue(self, shard: int) -> str:
        """The broker queue's name of ``shard``: ``heartwire.<group>.<shard>``."""
        if isinstance(shard, bool) or not isinstance(shard, int):
            raise TypeError(f"shard must be an int, got {type(shard).__name__} {shard!r}")
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard must be in [0, {self.shards}), got {shard}")
        return f"heartwire.{self.group}.{shard}"

    def headers(self, topic: str) -> dict[str, str]:
        """The SEND headers that mark a beat of ``topic`` with its shard."""
        return {SHARD_HEADER: str(self.shard_of(topic))}

    def destination(self, topic: str, dialect: Dialect | None) -> str:
        """The STOMP destination of a beat of ``topic`` on a broker of ``dialect``: the shard's
        queue on ActiveMQ, the topic itself elsewhere (RabbitMQ routes on the header; an
        unknown broker and the embedded one get the topic)."""
        if dialect is ACTIVEMQ:
            return "/queue/" + self.queue(self.shard_of(topic))
        validate_topic(topic)
        return (dialect or ACTIVEMQ).destination(topic)
