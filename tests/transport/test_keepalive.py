"""KeepAliveMonitor: counting missed intervals, expiring once, re-arming; its thread."""

from __future__ import annotations

import threading
import time

import pytest

from heartwire.transport import KeepAliveMonitor
from tests.brokers import wait_for


def test_ticks_count_misses_and_expire_once() -> None:
    expired: list[int] = []
    ka = KeepAliveMonitor(
        "c1", allowed=3, interval=1.0, on_expired=lambda m: expired.append(m.current)
    )
    assert (ka.current, ka.expired, ka.running) == (0, False, False)
    assert ka.tick() == 1
    assert ka.tick() == 2
    assert expired == [] and not ka.expired
    assert ka.tick() == 3
    assert expired == [3] and ka.expired and ka.expirations == 1
    assert ka.tick() == 4  # still counting, not firing again
    assert expired == [3]
    ka.alive()
    assert (ka.current, ka.expired) == (0, False)
    assert ka.tick() == 0  # the sign of life covered this interval
    for _ in range(3):
        ka.tick()
    assert expired == [3, 3] and ka.expirations == 2


def test_alive_within_each_interval_never_expires() -> None:
    ka = KeepAliveMonitor("c", allowed=1, interval=1.0, on_expired=lambda m: pytest.fail("expired"))
    for _ in range(10):
        ka.alive()
        assert ka.tick() == 0


def test_ping_after_every_check_and_errors_do_not_stop_it() -> None:
    pings: list[int] = []

    def ping(m: KeepAliveMonitor) -> None:
        pings.append(m.current)
        raise RuntimeError("broker gone")

    ka = KeepAliveMonitor("c", allowed=2, interval=1.0, ping=ping, on_expired=lambda m: 1 / 0)
    ka.tick()
    ka.tick()
    ka.tick()
    assert pings == [1, 2, 3] and ka.expired


def test_reset() -> None:
    ka = KeepAliveMonitor("c", allowed=1, interval=1.0)
    ka.tick()
    assert ka.expired
    ka.reset()
    assert (ka.current, ka.expired) == (0, False)


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        ({"allowed": 0}, ValueError, "allowed must be >= 1, got 0"),
        ({"allowed": 1.5}, TypeError, "allowed must be an int"),
        ({"interval": 0}, ValueError, "interval must be a finite number of seconds > 0, got 0"),
        ({"interval": float("inf")}, ValueError, "got inf"),
        ({"interval": "1"}, TypeError, "interval must be a number of seconds"),
        ({"on_expired": 3}, TypeError, "on_expired must be callable"),
        ({"ping": "x"}, TypeError, "ping must be callable"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], exc: type[Exception], words: str) -> None:
    args: dict[str, object] = {"id": "c", "allowed": 2, "interval": 1.0, **kwargs}
    with pytest.raises(exc, match=words.replace("(", r"\(")):
        KeepAliveMonitor(**args)  # type: ignore[arg-type]


def test_thread_pings_at_start_and_expires_without_answers() -> None:
    pings = []
    fired = threading.Event()
    ka = KeepAliveMonitor(
        "t",
        allowed=2,
        interval=0.05,
        ping=lambda m: pings.append(time.monotonic()),
        on_expired=lambda m: fired.set(),
    )
    t0 = time.monotonic()
    ka.start()
    ka.start()  # idempotent
    assert ka.running
    assert fired.wait(2.0), "the monitor did not expire"
    took = time.monotonic() - t0
    assert 0.09 <= took < 1.0, took
    assert pings and pings[0] - t0 < 0.05  # the first ping goes out at start
    ka.stop()
    assert not ka.running
    wait_for(
        lambda: not any(t.name == "heartwire-keepalive-t" for t in threading.enumerate()),
        2.0,
        "the keep-alive thread to end",
    )


def test_thread_with_answers_stays_alive() -> None:
    ka = KeepAliveMonitor("answered", allowed=2, interval=0.03)
    ka.ping = lambda m: m.alive()  # an instant echo
    ka.start()
    time.sleep(0.3)
    assert ka.current == 0 and not ka.expired and ka.expirations == 0
    ka.stop()
