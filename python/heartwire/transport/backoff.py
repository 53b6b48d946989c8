"""When and where a failover transport tries to connect: the pure schedule, no clock, no I/O.

:class:`Backoff` is the wait before each reconnection try: ``reconnect_interval`` every time,
or, with ``use_exponential_back_off``, ``reconnect_interval * back_off_multiplier ** n`` for
the n-th wait (0-based), capped at ``max_reconnect_delay``; ``reconnect_jitter`` (j) then
shortens each wait by a random fraction of itself: a wait of d becomes ``d * (1 - j * u)``, u
uniform in [0, 1), so it lies in ``[d * (1 - j), d]`` and never exceeds the cap.

:func:`startup_plan` and :func:`reconnect_plan` list the tries, each as ``(seconds to wait
first, broker)``, ending after the allowed number of attempts (``startup_max_reconnect_attempts``
and ``max_reconnect_attempts``; -1: never end). :func:`round_order` is the order of one pass
over the list (``randomize``: shuffled anew each pass). The connector (:mod:`.failover`) walks
a plan on the real clock; the tests walk it with a seeded or scripted random source, without
sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from heartwire.transport.urls import BrokerAddress, StompOptions

__all__ = [
    "Backoff",
    "Random",
    "new_random",
    "preferred",
    "probe_waits",
    "reconnect_plan",
    "round_order",
    "startup_plan",
]


class Random(Protocol):
    """The random source a plan draws from (``random.Random`` is one)."""

    def random(self) -> float: ...
    def shuffle(self, x: list[BrokerAddress]) -> None: ...


@dataclass(frozen=True)
class Backoff:
    """The waits between reconnection tries (see the module docs)."""

    #: The first wait (and every wait without exponential back-off), seconds.
    interval: float = 1.0
    #: Whether each wait is ``multiplier`` times the one before, up to ``max_delay``.
    exponential: bool = False
    multiplier: float = 2.0
    #: The cap on a wait before jitter, seconds (exponential back-off only).
    max_delay: float = 30.0
    #: The fraction of a wait that jitter may take off (0: none, 1: anything down to 0).
    jitter: float = 0.0

    @classmethod
    def of(cls, options: StompOptions) -> Backoff:
        """The back-off of a parsed URL's options."""
        return cls(
            interval=options.reconnect_interval,
            exponential=options.use_exponential_back_off,
            multiplier=options.back_off_multiplier,
            max_delay=options.max_reconnect_delay,
            jitter=options.reconnect_jitter,
        )

    def base(self, n: int) -> float:
        """The ``n``-th wait (0-based) before jitter, seconds."""
        if not self.exponential:
            return self.interval
        delay = self.interval
        # Multiplied step by step and stopped at the cap: no overflow however large n is.
        for _ in range(n):
            if delay >= self.max_delay:
                break
            delay *= self.multiplier
        return min(delay, self.max_delay)

    def delay(self, n: int, u: float) -> float:
        """The ``n``-th wait with jitter, for a draw ``u`` in [0, 1): in
        ``[base(n) * (1 - jitter), base(n)]``."""
        return self.base(n) * (1.0 - self.jitter * u)

    def delays(self, rng: Random) -> Iterator[float]:
        """Every wait in turn (a draw from ``rng`` for each only when there is jitter)."""
        n = 0
        while True:
            yield self.delay(n, rng.random() if self.jitter else 0.0)
            n += 1


def round_order(
    options: StompOptions, rng: Random, after: BrokerAddress | None = None
) -> list[BrokerAddress]:
    """One pass over the list: shuffled with ``randomize``; else in the URL's order, starting
    after ``after`` (the broker just lost) and coming back round to it."""
    brokers = list(options.brokers)
    if options.randomize:
        rng.shuffle(brokers)
        return brokers
    if after is None or after not in brokers:
        return brokers
    i = brokers.index(after)
    return brokers[i + 1 :] + brokers[: i + 1]


def _limited(
    steps: Iterator[tuple[float, BrokerAddress]], limit: int
) -> Iterator[tuple[float, BrokerAddress]]:
    if limit < 0:
        yield from steps
        return
    for _, step in zip(range(limit), steps, strict=False):
        yield step


def startup_plan(options: StompOptions, rng: Random) -> Iterator[tuple[float, BrokerAddress]]:
    """The tries of the first connection: each broker once, without waiting (one pass), then
    up to ``startup_max_reconnect_attempts`` more (-1: until one connects), round after round,
    waiting as :class:`Backoff` says before each."""
    first = round_order(options, rng)
    yield from ((0.0, broker) for broker in first)

    def more() -> Iterator[tuple[float, BrokerAddress]]:
        waits = Backoff.of(options).delays(rng)
        while True:
            for broker in round_order(options, rng):
                yield next(waits), broker

    yield from _limited(more(), options.startup_max_reconnect_attempts)


def reconnect_plan(
    options: StompOptions, lost: BrokerAddress, rng: Random
) -> Iterator[tuple[float, BrokerAddress]]:
    """The tries after ``lost`` failed, at most ``max_reconnect_attempts`` of them (-1: no
    limit; 0: none, the transport gives up at once):

    1. ``lost`` again, ``failover_check_count`` times, the first at once, then
       ``failover_check_timeout`` apart (a broker that merely dropped a connection is not
       abandoned);
    2. then pass after pass over the list (:func:`round_order`), each try after a
       :class:`Backoff` wait; with several brokers the first try of the first pass goes at
       once (the lost one was just checked; a lone broker waits).
    """

    def steps() -> Iterator[tuple[float, BrokerAddress]]:
        for check in range(options.failover_check_count):
            yield (options.failover_check_timeout if check else 0.0), lost
        waits = Backoff.of(options).delays(rng)
        first = len(options.brokers) > 1
        while True:
            for broker in round_order(options, rng, lost):
                yield (0.0 if first else next(waits)), broker
                first = False

    yield from _limited(steps(), options.max_reconnect_attempts)


def probe_waits(options: StompOptions, rng: Random) -> Iterator[float]:
    """``priority_backup``: the waits between tries of the preferred broker while connected to
    another one (the :class:`Backoff` schedule, started afresh at each move away from it)."""
    return Backoff.of(options).delays(rng)


def new_random(seed: int | None = None) -> random.Random:
    """The random source a connector uses by default (a private one, seeded from the OS)."""
    return random.Random(seed)


def preferred(options: StompOptions) -> BrokerAddress:
    """The broker ``priority_backup`` comes back to: the first of the URL as written."""
    return options.brokers[0]
