"""Review 18 finding 6: ``rabbitmq_definitions`` (and so ``declare_rabbitmq``) took durations
and counts RabbitMQ or AMQP cannot hold, instead of a ValueError naming them (each case failed
before the fix):

- ``expires`` below 0.5 ms rounds to ``x-expires: 0``: RabbitMQ refuses the declaration
  (PRECONDITION_FAILED ``{value_zero,0}``) after the exchange is made;
- ``beat_ttl`` below 0.5 ms rounds to ``x-message-ttl: 0``: every beat not delivered at once is
  dropped (a group with no member up loses them all);
- ``beat_ttl``/``expires``/``max_beats`` past a signed 64-bit integer: ``declare_rabbitmq``
  fails inside pika with ``struct.error('int too large to convert')``; and RabbitMQ 3.10 itself
  refuses a TTL or expiry over ten years (``value_too_large``: measured, 315 360 000 000 ms the
  largest taken), so the bound is ten years."""

from __future__ import annotations

import pytest

from heartwire.groups import ShardLayout, rabbitmq_definitions

LAYOUT = ShardLayout("g", 2)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("expires", 1e-5),
        ("beat_ttl", 1e-5),
        ("expires", 1e300),
        ("beat_ttl", 1e300),
        ("max_beats", 2**70),
        ("expires", 315_360_001),  # over ten years: RabbitMQ's value_too_large
        ("beat_ttl", 315_360_001),
    ],
)
def test_a_value_the_broker_cannot_take_is_refused_naming_it(argument: str, value: object) -> None:
    with pytest.raises(ValueError, match=argument):
        rabbitmq_definitions(LAYOUT, "svc.>", **{argument: value})  # type: ignore[arg-type]


def test_the_bounds_themselves_are_taken() -> None:
    defs = rabbitmq_definitions(LAYOUT, "svc.>", beat_ttl=0.001, expires=315_360_000)
    shard_queue = defs["queues"][0]["arguments"]
    assert shard_queue["x-message-ttl"] == 1
    assert shard_queue["x-expires"] == 315_360_000_000
    defs = rabbitmq_definitions(LAYOUT, "svc.>", max_beats=2**63 - 1, beat_ttl=315_360_000)
    assert defs["queues"][0]["arguments"]["x-max-length"] == 2**63 - 1
    assert defs["queues"][0]["arguments"]["x-message-ttl"] == 315_360_000_000
