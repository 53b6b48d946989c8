"""The failover schedule (heartwire.transport.backoff): waits, jitter bounds, orders and attempt
counts, walked without a clock or a socket (a scripted or seeded random source)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from heartwire.transport.backoff import (
    Backoff,
    probe_waits,
    reconnect_plan,
    round_order,
    startup_plan,
)
from heartwire.transport.urls import BrokerAddress, parse_url

A, B, C = (BrokerAddress("127.0.0.1", p) for p in (1, 2, 3))
LIST = "failover:(stomp://127.0.0.1:1,stomp://127.0.0.1:2,stomp://127.0.0.1:3)"


class Scripted:
    """A random source that returns the given draws in turn and rotates a list by one more
    place at each shuffle (1, 2, 3, ...): every pass's order is known."""

    def __init__(self, draws: list[float] | None = None) -> None:
        self.draws = iter(draws or [])
        self.shuffles = 0

    def random(self) -> float:
        return next(self.draws)

    def shuffle(self, x: list[BrokerAddress]) -> None:
        self.shuffles += 1
        k = self.shuffles % len(x)
        x[:] = x[k:] + x[:k]


def take(steps: Iterator[tuple[float, BrokerAddress]], n: int) -> list[tuple[float, int]]:
    return [(round(w, 9), b.port) for w, b in itertools.islice(steps, n)]


def test_the_constant_wait_is_reconnect_interval_as_before() -> None:
    b = Backoff.of(parse_url(LIST, reconnect_interval=0.7))
    assert [b.base(n) for n in range(5)] == [0.7] * 5
    assert list(itertools.islice(b.delays(Scripted()), 3)) == [0.7] * 3  # no draw without jitter


def test_exponential_back_off_grows_from_the_interval_to_the_cap() -> None:
    o = parse_url(
        LIST,
        reconnect_interval=0.5,
        use_exponential_back_off=True,
        back_off_multiplier=3,
        max_reconnect_delay=10,
    )
    b = Backoff.of(o)
    assert [b.base(n) for n in range(6)] == [0.5, 1.5, 4.5, 10.0, 10.0, 10.0]
    assert b.base(10**9) == 10.0  # no overflow, no long loop: stops at the cap
    one = Backoff.of(parse_url(LIST, use_exponential_back_off=True, back_off_multiplier=1))
    assert [one.base(n) for n in range(3)] == [1.0, 1.0, 1.0]


def test_jitter_takes_a_drawn_fraction_off_each_wait() -> None:
    o = parse_url(LIST, reconnect_interval=1, use_exponential_back_off=True, reconnect_jitter=0.5)
    waits = Backoff.of(o).delays(Scripted([0.0, 0.5, 0.999, 0.2]))
    assert [round(w, 6) for w in itertools.islice(waits, 4)] == [1.0, 1.5, 2.002, 7.2]


@given(
    interval=st.floats(0.001, 100),
    multiplier=st.floats(1, 10),
    cap_over=st.floats(0, 1000),
    jitter=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_every_wait_lies_in_its_jitter_bounds_and_under_the_cap(
    interval: float, multiplier: float, cap_over: float, jitter: float, seed: int
) -> None:
    b = Backoff(interval, True, multiplier, interval + cap_over, jitter)
    for n, wait in enumerate(itertools.islice(b.delays(random.Random(seed)), 40)):
        base = b.base(n)
        assert base * (1 - jitter) - 1e-9 <= wait <= base <= b.max_delay
        assert base >= min(interval, b.max_delay)
        if n:
            assert b.base(n) >= b.base(n - 1)  # never shrinks before jitter


def test_the_reconnect_plan_checks_the_lost_broker_then_goes_round_after_it() -> None:
    o = parse_url(LIST, failover_check_count=2, failover_check_timeout=0.4, reconnect_interval=1)
    # The same steps as before these options: two checks of the lost 2, then 3 at once, then
    # the list from after 2, reconnect_interval apart.
    assert take(reconnect_plan(o, B, Scripted()), 8) == [
        (0.0, 2),
        (0.4, 2),
        (0.0, 3),
        (1.0, 1),
        (1.0, 2),
        (1.0, 3),
        (1.0, 1),
        (1.0, 2),
    ]
    lone = parse_url("failover:(stomp://127.0.0.1:1)", reconnect_interval=0.5)
    assert take(reconnect_plan(lone, A, Scripted()), 3) == [(0.0, 1), (0.5, 1), (0.5, 1)]


def test_max_reconnect_attempts_counts_every_try_checks_included() -> None:
    for limit, expected in ((0, 0), (1, 1), (2, 2), (5, 5)):
        o = parse_url(LIST, max_reconnect_attempts=limit, failover_check_count=2)
        assert len(list(reconnect_plan(o, A, Scripted()))) == expected, limit
    forever = parse_url(LIST, max_reconnect_attempts=-1)
    assert len(take(reconnect_plan(forever, A, Scripted()), 1000)) == 1000


def test_back_off_grows_across_passes_and_restarts_at_each_outage() -> None:
    o = parse_url(
        LIST,
        reconnect_interval=0.1,
        use_exponential_back_off=True,
        max_reconnect_delay=0.5,
        max_reconnect_attempts=7,
    )
    steps = take(reconnect_plan(o, C, Scripted()), 10)
    assert steps == [(0.0, 3), (0.0, 1), (0.1, 2), (0.2, 3), (0.4, 1), (0.5, 2), (0.5, 3)]
    assert take(reconnect_plan(o, C, Scripted()), 10) == steps  # a new plan, a new back-off


def test_randomize_shuffles_each_pass_anew() -> None:
    o = parse_url(LIST, randomize=True, reconnect_interval=1, failover_check_count=1)
    rng = Scripted()
    # The check of the lost broker first, then passes rotated by 1, 2, 3 (the scripted shuffle).
    assert [b for _, b in take(reconnect_plan(o, A, rng), 10)] == [1, 2, 3, 1, 3, 1, 2, 1, 2, 3]
    # With a real random source every pass is a permutation of the whole list, and passes
    # differ (12 passes of 3 brokers all alike: 6 ** -11).
    seeded = random.Random(7)
    passes = [tuple(b.port for b in round_order(o, seeded)) for _ in range(12)]
    assert all(sorted(p) == [1, 2, 3] for p in passes) and len(set(passes)) > 1
    assert round_order(parse_url(LIST), Scripted(), B) == [C, A, B]  # not randomized


def test_the_startup_plan_tries_each_broker_once_then_the_allowed_more() -> None:
    assert take(startup_plan(parse_url(LIST), Scripted()), 10) == [(0.0, 1), (0.0, 2), (0.0, 3)]
    o = parse_url(LIST, startup_max_reconnect_attempts=4, reconnect_interval=0.25)
    assert take(startup_plan(o, Scripted()), 10) == [
        (0.0, 1),
        (0.0, 2),
        (0.0, 3),
        (0.25, 1),
        (0.25, 2),
        (0.25, 3),
        (0.25, 1),
    ]
    shuffled = parse_url(LIST, randomize=True, startup_max_reconnect_attempts=2)
    assert [b for _, b in take(startup_plan(shuffled, Scripted()), 10)] == [2, 3, 1, 3, 1]
    endless = parse_url(LIST, startup_max_reconnect_attempts=-1)
    assert len(take(startup_plan(endless, Scripted()), 500)) == 500


def test_probes_of_the_preferred_broker_follow_the_back_off() -> None:
    o = parse_url(
        LIST,
        priority_backup=True,
        reconnect_interval=0.2,
        use_exponential_back_off=True,
        max_reconnect_delay=1,
    )
    assert [round(w, 9) for w in itertools.islice(probe_waits(o, Scripted()), 5)] == [
        0.2,
        0.4,
        0.8,
        1.0,
        1.0,
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"randomize": "sometimes"}, "option randomize='sometimes' is not a boolean"),
        ({"priority_backup": 2}, "option priority_backup must be a bool, got int 2"),
        ({"use_exponential_back_off": "2"}, "option use_exponential_back_off='2' is not a"),
        (
            {"back_off_multiplier": 0.5},
            "option back_off_multiplier=0.5 must be a finite number >= 1",
        ),
        ({"back_off_multiplier": "inf"}, "option back_off_multiplier='inf' must be a finite"),
        ({"back_off_multiplier": "x"}, "option back_off_multiplier='x' is not a number"),
        ({"back_off_multiplier": True}, "option back_off_multiplier must be a number, got bool"),
        ({"max_reconnect_delay": 0}, "option max_reconnect_delay must be a finite number of"),
        (
            {"reconnect_jitter": 1.5},
            "option reconnect_jitter=1.5 must be a finite number from 0 to 1",
        ),
        ({"reconnect_jitter": -0.1}, "option reconnect_jitter=-0.1 must be a finite number from 0"),
        ({"max_reconnect_attempts": -2}, "option max_reconnect_attempts must be >= -1, got -2"),
        ({"max_reconnect_attempts": 1.5}, "option max_reconnect_attempts must be an int, got"),
        (
            {"startup_max_reconnect_attempts": "1e3"},
            "option startup_max_reconnect_attempts='1e3' is",
        ),
        (
            {"use_exponential_back_off": True, "reconnect_interval": 5, "max_reconnect_delay": 2},
            "option max_reconnect_delay=2.0 is below reconnect_interval=5.0",
        ),
        # Review 19, finding 2: every wait 0 (0 * multiplier ** n), tries back to back forever.
        (
            {"priority_backup": True, "reconnect_interval": 0},
            "option reconnect_interval=0.0 must be >= 0.01 with priority_backup=True",
        ),
        (
            {"use_exponential_back_off": True, "reconnect_interval": "0"},
            "option reconnect_interval=0.0 must be >= 0.01 with use_exponential_back_off=True",
        ),
        (
            {"priority_backup": True, "reconnect_interval": 0.001},
            "option reconnect_interval=0.001 must be >= 0.01 with priority_backup=True",
        ),
        # Review 19, finding 8: a wait past threading.TIMEOUT_MAX raised in the supervisor.
        ({"reconnect_interval": 1e10}, "option reconnect_interval=10000000000.0 must be at most"),
        ({"max_reconnect_delay": "1e300"}, "option max_reconnect_delay='1e300' must be at most"),
        ({"reconnect_period": 86400.5}, "option reconnect_period=86400.5 must be at most 86400"),
        ({"heartbeat": 10**6}, "option heartbeat=1000000 must be at most 86400 seconds"),
    ],
)
def test_bad_failover_options_are_named_with_their_value(options: dict, message: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        parse_url(LIST, **options)
    assert message in str(info.value), str(info.value)


def test_failover_options_from_the_query_and_their_errors() -> None:
    o = parse_url(
        LIST + "?randomize=true&priority_backup=yes&use_exponential_back_off=1"
        "&back_off_multiplier=1.5&max_reconnect_delay=4&reconnect_jitter=0.25"
        "&max_reconnect_attempts=10&startup_max_reconnect_attempts=-1"
    )
    assert (o.randomize, o.priority_backup, o.use_exponential_back_off) == (True, True, True)
    assert (o.back_off_multiplier, o.max_reconnect_delay, o.reconnect_jitter) == (1.5, 4.0, 0.25)
    assert (o.max_reconnect_attempts, o.startup_max_reconnect_attempts) == (10, -1)
    d = parse_url(LIST)  # the defaults: the behaviour before these options
    assert (d.randomize, d.priority_backup, d.use_exponential_back_off) == (False, False, False)
    assert (d.max_reconnect_attempts, d.startup_max_reconnect_attempts) == (-1, 0)
    assert (d.reconnect_jitter, d.back_off_multiplier, d.max_reconnect_delay) == (0.0, 2.0, 30.0)
    with pytest.raises(ValueError, match=r"option reconnect_jitter='2' must be a finite number"):
        parse_url(LIST + "?reconnect_jitter=2")
    with pytest.raises(ValueError, match="priority_backup=True needs a failover list of two"):
        parse_url("stomp://127.0.0.1:1?priority_backup=true")
    with pytest.raises(ValueError, match=r"option failover_check_timeout='1e10' must be at most"):
        parse_url(LIST + "?failover_check_timeout=1e10")
    with pytest.raises(ValueError, match=r"reconnect_interval=0.0 must be >= 0.01 with priority_b"):
        parse_url(LIST + "?priority_backup=true&reconnect_interval=0")
    # The bounds themselves are accepted; without back-off or priority_backup, 0 still is.
    edge = parse_url(LIST + "?reconnect_period=86400&priority_backup=1&reconnect_interval=0.01")
    assert (edge.reconnect_period, edge.reconnect_interval) == (86400.0, 0.01)
    assert parse_url(LIST + "?reconnect_interval=0").reconnect_interval == 0.0
    with pytest.raises(ValueError, match="priority_backup=True needs a failover list of two"):
        parse_url("failover:(stomp://127.0.0.1:1)", priority_backup=True)
    # ActiveMQ's camelCase names are refused with ours named.
    with pytest.raises(ValueError, match="ActiveMQ's maxReconnectAttempts is max_reconnect_att"):
        parse_url(LIST + "?maxReconnectAttempts=3")
    with pytest.raises(ValueError, match=r"initialReconnectDelay is reconnect_interval here \(in"):
        parse_url(LIST, initialReconnectDelay=10)


def test_a_wait_past_timeout_max_neither_raises_nor_ends_the_supervisor() -> None:
    """Review 19, finding 8, behind parse_url's bound (StompOptions can be built directly): a
    wait longer than threading.TIMEOUT_MAX is waited in pieces. The supervisor with a probe
    due in 1e10 s keeps running (Event.wait raised OverflowError and it closed the
    transport), and a 1e300 s sleep ends with close(), not with an error."""
    import dataclasses
    import threading
    import time

    from heartwire.transport.failover import Connector

    options = dataclasses.replace(parse_url(LIST), reconnect_interval=1e300)
    c = Connector(
        options,
        make_link=lambda broker: pytest.fail(f"no connection is made here ({broker})"),
        attach=lambda link: None,
        detach=lambda link, reason: None,
    )
    c._probe_at = time.monotonic() + 1e10
    supervisor = threading.Thread(target=c._supervise, daemon=True)
    supervisor.start()
    slept: list[bool] = []
    sleeper = threading.Thread(target=lambda: slept.append(c._sleep(1e300)), daemon=True)
    sleeper.start()
    supervisor.join(0.3)
    assert supervisor.is_alive() and c.failure is None, c.failure
    assert not c.closed and not slept
    c.close()
    supervisor.join(5)
    sleeper.join(5)
    assert not supervisor.is_alive() and not sleeper.is_alive()
    assert slept == [False] and c.failure is None
