"""Monitor groups: several monitors sharing a fleet, standbys taking over (issue 18; the design
and the broker facts it rests on: ``docs/groups-design.md``).

Built so far: the shards on the wire. A group splits its topics over ``shards`` shards by a
hash every process and language computes alike (:func:`shard_of`); a publisher given the
group's :class:`ShardLayout` (``HeartbeatPublisher(..., shards=layout)``) sends each beat where
the group consumes its shard: the shard's queue ``heartwire.<group>.<k>`` on ActiveMQ (a fixed
number of broker destinations, not one per topic), the topic itself with a ``heartwire-shard``
header on RabbitMQ (a headers exchange routes it to the shard's queue). See ``docs/shards.md``.
"""

from __future__ import annotations

from heartwire.transport.shards import (
    DEFAULT_SHARDS,
    MAX_SHARDS,
    SHARD_HEADER,
    ShardLayout,
    jump_hash,
    shard_of,
)

__all__ = [
    "DEFAULT_SHARDS",
    "MAX_SHARDS",
    "SHARD_HEADER",
    "ShardLayout",
    "jump_hash",
    "shard_of",
]
