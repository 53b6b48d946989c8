"""HMAC-signed beats end to end over real brokers: spoofed beats cannot revive a dead service.

A signed publisher and a monitor with the same key talk through ActiveMQ and RabbitMQ. Once
the service has stopped and the monitor has failed it, an attacker on the broker sends beats
for it: unsigned, legacy text, signed with another key, a captured beat with a field changed,
a captured beat re-addressed to another topic, and captured beats sent again unchanged (from
the service's current boot and from an earlier one). Each is refused and counted under its
reason, the topic stays FAILED, and a genuine new beat still resumes it (the channel works).
Unit tests on the replay rule run on a ManualClock, without a broker.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import heartwire as hw
from heartwire.beat import Beat, BeatCodec
from heartwire.transport import Message, connect
from tests import brokers as B
from tests.brokers import brokers, wait_for  # noqa: F401  (brokers: the session fixture)

KEY = b"heartwire-test-key-" + uuid.uuid4().hex.encode()
PERIOD = 0.2
FAST = "heartbeat=1&reconnect_interval=0.2&connect_timeout=3&keepalive_interval=0"


def uid() -> str:
    return "sec" + uuid.uuid4().hex[:10]


class Capture:
    """Raw bodies published to one topic, as an eavesdropper on the broker sees them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.bodies.append(message.body)

    def snapshot(self) -> list[bytes]:
        with self.lock:
            return list(self.bodies)


class Events(hw.SubscriberListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resumed: list[str] = []
        self.failed: list[str] = []

    def on_failed(self, event: hw.Failed) -> None:
        with self.lock:
            self.failed.append(event.topic)

    def on_resumed(self, event: hw.Resumed) -> None:
        with self.lock:
            self.resumed.append(event.topic)


def rejected(mon: hw.HeartbeatMonitor) -> dict[str, int]:
    return dict(mon.stats()["rejected"])


def _run_publisher(broker_url: str, topic: str, capture: Capture, closing: list[Any]) -> str:
    """A signed publisher beats until 3 of its beats were seen on the wire, then stops;
    returns its boot id."""
    t = connect(broker_url)
    closing.append(t)
    pub = hw.HeartbeatPublisher(t, topic, period=PERIOD, key=KEY)
    closing.append(pub)
    pub.start()
    mine = f'"boot":"{pub.boot_id}"'.encode()
    wait_for(
        lambda: sum(mine in b for b in capture.snapshot()) >= 3, 10, f"3 beats of {pub.boot_id}"
    )
    pub.stop()
    return pub.boot_id


@pytest.mark.usefixtures("brokers")
@pytest.mark.parametrize("name", ["activemq", "rabbitmq"])
def test_spoofed_beats_do_not_resume_a_dead_service(name: str, closing: list[Any]) -> None:
    B.ensure(name)
    url = B.url(name) + "?" + FAST
    topic = f"{uid()}.svc"
    events = Events()
    mon_t = connect(url)
    closing.append(mon_t)
    mon = hw.HeartbeatMonitor(mon_t, topic, period=PERIOD, key=KEY, listeners=[events])
    closing.append(mon)
    mon.start()
    attacker = connect(url)
    closing.append(attacker)
    capture = Capture()
    attacker.subscribe(topic, capture)
    time.sleep(0.3)  # SUBSCRIBE frames are not acknowledged: let the broker register them

    # An earlier boot of the service, then the current one; both stop: the topic fails.
    boot_a = _run_publisher(url, topic, capture, closing)
    old_boot = capture.snapshot()
    time.sleep(0.05)  # the next boot's beats are sent strictly later
    boot_b = _run_publisher(url, topic, capture, closing)
    assert boot_a != boot_b
    wait_for(
        lambda: mon.status(topic).state == hw.State.FAILED, 10, f"{topic} failed after its stop"
    )
    current = [b for b in capture.snapshot() if json.loads(b)["boot"] == boot_b]
    assert old_boot and current and json.loads(old_boot[-1])["boot"] == boot_a
    assert rejected(mon) == {}
    resumed_before = len(events.resumed)
    beats_before = mon.stats()["beats"]

    last = json.loads(current[-1])
    newer_seq = last["seq"] + 100
    unsigned = BeatCodec().encode(Beat(topic, newer_seq, boot_b, time.time(), PERIOD))
    other_key = BeatCodec(b"not-the-key").encode(
        Beat(topic, newer_seq, boot_b, time.time(), PERIOD)
    )
    altered = dict(last, seq=newer_seq, sent=time.time())  # signature of the old fields kept
    elsewhere = f"{uid()}.svc"  # a valid beat of another topic, re-addressed to this one
    moved = BeatCodec(KEY).encode(Beat(elsewhere, 1, boot_b, time.time(), PERIOD))
    spoofs = [
        unsigned,
        f"{topic} HEARTBEAT".encode(),
        other_key,
        json.dumps(altered).encode(),
        moved,
        current[-1],  # the last beat of the current boot, sent again
        current[0],  # an earlier one of the current boot
        old_boot[-1],  # the last beat of the earlier boot
    ]
    for body in spoofs:
        attacker.publish(topic, body)
    expected = {"unsigned": 2, "bad_signature": 2, "topic_mismatch": 1, "replayed": 3}
    wait_for(lambda: rejected(mon) == expected, 10, f"rejections {expected} (have {rejected(mon)})")
    time.sleep(2 * PERIOD)  # a wrongly taken beat would show as a resume by now
    assert mon.status(topic).state == hw.State.FAILED
    assert len(events.resumed) == resumed_before
    assert mon.stats()["beats"] == beats_before

    # The same channel carries a genuine beat: a new boot of the service resumes the topic.
    genuine = BeatCodec(KEY).encode(Beat(topic, 1, uuid.uuid4().hex, time.time(), PERIOD))
    attacker.publish(topic, genuine)
    wait_for(
        lambda: mon.status(topic).state == hw.State.ALIVE, 10, f"{topic} resumed by a real beat"
    )
    assert rejected(mon) == expected


# -- the replay rule, without a broker ----------------------------------------------------------

#: The monitors _monitor started in the running test.
_started: list[hw.HeartbeatMonitor] = []


@pytest.fixture(autouse=True)
def _stop_started_monitors() -> Iterator[None]:
    """Stops what _monitor started: a monitor's thread must not outlive its test (other tests
    count the monitor threads alive)."""
    yield
    while _started:
        _started.pop().stop()


def _monitor(
    clock: hw.ManualClock, key: bytes | None = KEY, max_beat_age: float | None = math.inf
) -> hw.HeartbeatMonitor:
    # Without an age bound by default: the replay rule's tests use made-up send times (1000.0).
    mon = hw.HeartbeatMonitor(
        None, "svc.>", period=1.0, clock=clock, key=key, max_beat_age=max_beat_age
    )
    mon.start()
    _started.append(mon)
    return mon


def _deliver(mon: hw.HeartbeatMonitor, beat: Beat, key: bytes | None = KEY) -> None:
    mon.handle_message(Message(beat.topic, BeatCodec(key).encode(beat)))


def test_replay_rule_same_boot_and_restarts() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock)
    _deliver(mon, Beat("svc.a", 5, "boot1", 1000.0, 1.0))
    _deliver(mon, Beat("svc.a", 5, "boot1", 1000.0, 1.0))  # the same beat again
    _deliver(mon, Beat("svc.a", 4, "boot1", 1001.0, 1.0))  # an older seq, later time
    assert rejected(mon) == {"replayed": 2}
    _deliver(mon, Beat("svc.a", 6, "boot1", 999.0, 1.0))  # a newer seq: taken, whatever the time
    _deliver(mon, Beat("svc.a", 1, "boot2", 1002.0, 1.0))  # a restart: taken
    _deliver(mon, Beat("svc.a", 6, "boot1", 1003.0, 1.0))  # boot1 is still remembered
    _deliver(mon, Beat("svc.a", 1, "boot2", 1002.0, 1.0))  # and so is boot2
    assert rejected(mon) == {"replayed": 4}
    # A restart after the publisher's clock stepped back an hour is not taken for a replay.
    _deliver(mon, Beat("svc.a", 1, "boot3", 1002.0 - 3600, 1.0))
    _deliver(mon, Beat("svc.a", 1, "boot4", 1002.0 - 3500, 1.0))
    assert rejected(mon) == {"replayed": 4} and mon.stats()["beats"] == 5
    # Four boots remembered (boot1, boot2, boot3, boot4, least recently heard first): an unknown
    # boot sent before boot1's last beat (999) is a replay from a forgotten boot.
    _deliver(mon, Beat("svc.a", 9, "boot0", 998.0, 1.0))
    _deliver(mon, Beat("svc.a", 1, "boot5", 2000.0, 1.0))  # taken; boot1 is forgotten
    _deliver(mon, Beat("svc.a", 7, "boot1", 1000.0, 1.0))  # before boot2's last (1002): replay
    assert rejected(mon) == {"replayed": 6} and mon.stats()["beats"] == 6
    # Topics are independent; a removed topic starts afresh.
    _deliver(mon, Beat("svc.b", 1, "boot1", 1.0, 1.0))
    mon.remove("svc.a")
    _deliver(mon, Beat("svc.a", 1, "boot1", 1.0, 1.0))
    assert rejected(mon) == {"replayed": 6} and mon.stats()["beats"] == 8
    assert mon.metrics()["rejected"] == {"replayed": 6}


def test_replayed_beat_does_not_resume_a_failed_topic() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock)
    captured = Beat("svc.a", 9, "boot1", 1000.0, 1.0)
    _deliver(mon, captured)
    clock.advance(3.0)
    mon.drain()
    assert mon.status("svc.a").state == hw.State.FAILED
    _deliver(mon, captured)
    clock.advance(0.1)
    mon.drain()
    assert mon.status("svc.a").state == hw.State.FAILED
    assert rejected(mon) == {"replayed": 1}


def test_without_a_key_beats_are_not_checked_for_replays() -> None:
    # Unsigned beats can be forged at will: a replay check would only hide broker duplicates.
    mon = _monitor(hw.ManualClock(), key=None)
    beat = Beat("svc.a", 5, "boot1", 1000.0, 1.0)
    _deliver(mon, beat, key=None)
    _deliver(mon, beat, key=None)
    assert rejected(mon) == {} and mon.stats()["beats"] == 2


def test_signed_beats_without_seq_or_boot_are_taken() -> None:
    mon = _monitor(hw.ManualClock())
    for _ in range(2):
        _deliver(mon, Beat("svc.a", None, "boot1", 1000.0, 1.0))
        _deliver(mon, Beat("svc.b", 3, None, 1000.0, 1.0))
    assert rejected(mon) == {} and mon.stats()["beats"] == 4


# -- a refused beat changes nothing about its topic (issue 14, item 1) ---------------------------


def test_refused_replays_with_other_periods_do_not_keep_a_dead_service_alive() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock)
    now = time.time()
    # The service beats at 1 s, then switches to 2 s; an eavesdropper keeps one beat of each.
    at_1s = Beat("svc.a", 1, "boot1", now, 1.0)
    _deliver(mon, at_1s)
    at_2s = Beat("svc.a", 2, "boot1", now + 0.5, 2.0)
    clock.advance(0.5)
    _deliver(mon, at_2s)
    assert mon.status("svc.a").period == 2.0
    # The service dies. The two captured beats, replayed in turn, are refused every time...
    for i in range(20):
        clock.advance(0.5)
        _deliver(mon, at_1s if i % 2 == 0 else at_2s)
    mon.drain()
    assert rejected(mon) == {"replayed": 20}
    # ...and so must not move its period or its deadline: it failed 2 s (+ grace) after the
    # last genuine beat, 10 s ago.
    status = mon.status("svc.a")
    assert status.period == 2.0
    assert status.state == hw.State.FAILED, status


def test_a_refused_beat_with_a_long_period_does_not_delay_detection() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock)
    now = time.time()
    old = Beat("svc.a", 1, "boot1", now - 1.0, 100.0)  # captured earlier, period 100 s
    _deliver(mon, Beat("svc.a", 2, "boot1", now, 1.0))  # the topic beats at 1 s
    before = mon.status("svc.a")
    _deliver(mon, old)  # replayed: refused
    assert rejected(mon) == {"replayed": 1}
    after = mon.status("svc.a")
    assert (after.period, after.grace, after.next_deadline) == (
        before.period,
        before.grace,
        before.next_deadline,
    )
    clock.advance(1.2)
    assert mon.status("svc.a").state == hw.State.FAILED


# -- beats of a boot the monitor never saw: the age bound (issue 14, item 10) --------------------


def test_an_old_beat_of_a_boot_never_seen_does_not_revive_a_dead_topic() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock, max_beat_age=None)  # the default bound
    mon.expect("svc.a")
    # Captured ten minutes before the monitor started: its boot is unknown to the monitor.
    captured = Beat("svc.a", 7, "boot-before", time.time() - 600, 1.0)
    _deliver(mon, Beat("svc.a", 1, "boot-now", time.time(), 1.0))  # the current boot
    clock.advance(3.0)
    assert mon.status("svc.a").state == hw.State.FAILED  # the service died
    _deliver(mon, captured)
    clock.advance(0.1)
    mon.drain()
    assert mon.status("svc.a").state == hw.State.FAILED
    assert rejected(mon) == {"stale": 1}
    assert mon.stats()["beats"] == 1


def test_max_beat_age_bounds_send_time_both_ways() -> None:
    clock = hw.ManualClock()
    mon = _monitor(clock, max_beat_age=None)  # 3 periods + 60 s
    now = time.time()
    _deliver(mon, Beat("svc.a", 1, "b1", now - 50, 1.0))  # 50 s old: within 63 s
    _deliver(mon, Beat("svc.a", 1, "b2", now + 50, 1.0))  # a clock 50 s ahead: within
    _deliver(mon, Beat("svc.a", 1, "b3", now - 70, 1.0))  # 70 s old: refused
    _deliver(mon, Beat("svc.a", 1, "b4", now + 120, 1.0))  # a clock 2 min ahead: refused
    assert rejected(mon) == {"stale": 2} and mon.stats()["beats"] == 2
    # The allowance follows the topic's period: 3 x 100 s + 60 s.
    mon.expect("svc.slow", period=100.0)
    _deliver(mon, Beat("svc.slow", 1, "b1", now - 300, 100.0))
    _deliver(mon, Beat("svc.slow", 2, "b1", now - 400, 100.0))
    assert rejected(mon) == {"stale": 3} and mon.stats()["beats"] == 3
    # An unknown topic gets the monitor's period, not the one the (old) beat claims.
    _deliver(mon, Beat("svc.new", 1, "b1", now - 300, 1e6))
    assert "svc.new" not in mon and rejected(mon) == {"stale": 4}
    # A refused beat changes nothing: not learned, not re-tuned.
    before = mon.status("svc.a")
    _deliver(mon, Beat("svc.a", 9, "b1", now - 3600, 50.0))
    assert mon.status("svc.a") == before

    fixed = _monitor(hw.ManualClock(), max_beat_age=5.0)
    assert fixed.max_beat_age == 5.0
    _deliver(fixed, Beat("svc.a", 1, "b1", time.time() - 10, 1.0))
    assert rejected(fixed) == {"stale": 1}
    unbounded = _monitor(hw.ManualClock(), max_beat_age=math.inf)
    _deliver(unbounded, Beat("svc.a", 1, "b1", time.time() - 86400, 1.0))
    assert rejected(unbounded) == {}
    # Unsigned beats are not checked: anyone can write any `sent` into them.
    plain = _monitor(hw.ManualClock(), key=None, max_beat_age=None)
    _deliver(plain, Beat("svc.a", 1, "b1", 1000.0, 1.0), key=None)
    assert rejected(plain) == {}


def test_stale_beats_are_logged_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[hw.ExceptionEvent] = []

    class Exceptions(hw.SubscriberListener):
        def on_exception(self, event: hw.ExceptionEvent) -> None:
            seen.append(event)

    mon = _monitor(hw.ManualClock(), max_beat_age=None)
    mon.add_listener(Exceptions())
    with caplog.at_level("WARNING", logger="heartwire.monitor"):
        _deliver(mon, Beat("svc.a", 1, "b1", time.time() - 3600, 1.0))
    assert mon.drain()
    assert [e.reason for e in seen] == ["stale"]
    assert "s before the monitor's wall clock, more than max_beat_age 63 s" in seen[0].detail
    assert any("max_beat_age" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("value", "exc"),
    [(0, ValueError), (-1.0, ValueError), (math.nan, ValueError), ("60", TypeError)],
)
def test_max_beat_age_rejects_bad_values(value: object, exc: type[Exception]) -> None:
    with pytest.raises(exc, match=r"max_beat_age .*got"):
        hw.HeartbeatMonitor(None, "svc.>", key=KEY, max_beat_age=value)  # type: ignore[arg-type]


def test_the_default_max_beat_age_follows_the_period_of_a_topic_in_a_reused_slot() -> None:
    # R1 F10: the default bound read the topic's period at index `handle`, not at its slot
    # (handle & 0xFFFFFFFF): for a topic in a reused slot (generation >= 1) the index was out
    # of range, and the bound fell back to the monitor's period (60 s: 240 s instead of 60.3 s).
    mon = hw.HeartbeatMonitor(None, "svc.>", period=60.0, clock=hw.ManualClock(), key=KEY)
    mon.start()
    try:
        mon.expect("svc.churn", period=0.1)
        mon.remove("svc.churn")
        assert mon.drain()
        handle = mon.expect("svc.reused", period=0.1)  # 3 x 0.1 + 60 = 60.3 s
        assert handle >> 32 >= 1, f"slot not reused: handle {handle:#x}"
        _deliver(mon, Beat("svc.reused", 1, "b1", time.time() - 100.0, 0.1))
        assert rejected(mon) == {"stale": 1}
    finally:
        mon.stop()
